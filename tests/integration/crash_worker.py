"""A process for the crash tests: sends or receives through the library, logging each result
as soon as the library returns it (flushed, so the log survives what the test does)."""
import sys

import mccs


def main(mode: str, config: str, name: str, log: str, peer: str, count: int) -> None:
    with mccs.connect(config, name, connect_timeout=30) as client, open(log, "a", buffering=1) as out:
        for k in range(count):
            if mode == "send":
                msg_id = client.send(peer, f"{name}:{k}".encode())
                out.write(f"{msg_id} {name}:{k}\n")
            else:
                msg = client.recv(timeout=60)
                if msg is None:
                    return
                out.write(f"{msg.msg_id} {msg.data.decode()}\n")


if __name__ == "__main__":
    mode, config, name, log, peer, count = sys.argv[1:]
    main(mode, config, name, log, peer, int(count))
