"""The daemon: the asyncio shell around mccs.core (shell), the socket server for processes
(server), the one driver of the core's passes (driver), the trace writer (trace), service
conventions (service) and the pre-flight check of `mccs daemon --check` (preflight)."""
