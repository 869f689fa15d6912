"""`python -m mccs.cli`: the `mccs` command."""
from mccs.cli.main import main

raise SystemExit(main())
