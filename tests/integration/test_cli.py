"""The `mccs` command line end to end, exit codes included (docs/DESIGN.md section 8)."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from mccs.config import ConfigError, load
from mccs.testbed.hosts import DaemonProcess, write_config

pytestmark = pytest.mark.timeout(90)


def mccs(*args, stdin=b""):
    p = subprocess.run([sys.executable, "-m", "mccs.cli", *map(str, args)], input=stdin, capture_output=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr.decode()


def test_cli_end_to_end(tmp_path):
    cfg = write_config(tmp_path, "AA", [{"peer": "BB", "port": "/nonexistent/tty"}])
    rc, _, err = mccs("send", "-c", cfg, "--as", "S", "AAR", "x")
    assert rc == 3 and "no MCCS daemon answers" in err
    rc, out, err = mccs("status", "-c", cfg, "--json")
    assert rc == 3 and json.loads(out)["daemon"] == "not running"
    with DaemonProcess(cfg):
        rc, out, _ = mccs("send", "-c", cfg, "--as", "S", "AAR", "hello", "--user-id", "9")
        assert rc == 0 and int(out) > 0
        rc, out2, _ = mccs("send", "-c", cfg, "--as", "S", "AAR", stdin=b"\x00\xffbinary")
        assert rc == 0 and int(out2) == int(out) + 1
        rc, out, _ = mccs("recv", "-c", cfg, "--as", "R", "--user-id", "9", "--json")
        got = json.loads(out)
        assert rc == 0 and got["text"] == "hello" and got["user_id"] == 9 and got["from_id"] == "AAS   "
        rc, out, _ = mccs("recv", "-c", cfg, "--as", "R", "--from", "AAS")
        assert rc == 0 and out == b"\x00\xffbinary"
        rc, out, err = mccs("recv", "-c", cfg, "--as", "R", "--nowait")
        assert rc == 1 and "nothing received" in err
        rc, out, err = mccs("recv", "-c", cfg, "--as", "R", "--timeout", "0.3")
        assert rc == 1
        rc, _, err = mccs("send", "-c", cfg, "--as", "S", "CCX", "x")
        assert rc == 2 and "host 'CC' is unknown" in err
        rc, _, err = mccs("send", "-c", cfg, "--as", "S", "AAR", "x" * 200)
        assert rc == 2 and "over the maximum" in err
        rc, _, err = mccs("send", "-c", cfg, "--as", "TOOLONG", "AAR", "x")
        assert rc == 2 and "invalid process name" in err
        mccs("send", "-c", cfg, "--as", "S", "BBX", "waits")
        rc, out, _ = mccs("status", "-c", cfg, "--json")
        status = json.loads(out)
        assert rc == 0 and status["host"] == "AA" and status["lists"] == {"wait": 0, "send": 1, "recv": 0}
        assert status["lines"][0]["peer"] == "BB" and "counters" in status
        rc, out, _ = mccs("status", "-c", cfg)
        assert rc == 0 and b"SEND_LIST 1" in out
    rc, _, err = mccs("recv", "-c", tmp_path / "missing.toml", "--as", "R")
    assert rc == 2 and "no such config file" in err
    rc, _, err = mccs("send", "AAR", "x")
    assert rc == 2


def test_json_data_is_base64(tmp_path):
    cfg = write_config(tmp_path, "AA", [])
    with DaemonProcess(cfg):
        mccs("send", "-c", cfg, "--as", "S", "AAR", stdin=b"\xff\xfe")
        rc, out, _ = mccs("recv", "-c", cfg, "--as", "R", "--json")
    got = json.loads(out)
    assert base64.b64decode(got["data"]) == b"\xff\xfe" and got["text"] is None


def test_recv_whose_output_fails_leaves_the_message_to_be_received_again(tmp_path):
    """`mccs recv` took the message off RECV_LIST, then failed to write it (a directory as --out, a
    missing folder, a full disk): the message was lost (an adversarial test). Now it is confirmed
    only once written."""
    cfg = write_config(tmp_path, "AA", [])
    with DaemonProcess(cfg):
        mccs("send", "-c", cfg, "--as", "S", "AAR", "keep me")
        for out in (tmp_path, tmp_path / "missing" / "msg.bin"):
            rc, _, err = mccs("recv", "-c", cfg, "--as", "R", "--out", out)
            assert rc == 2 and "stays on RECV_LIST" in err, err
        with open("/dev/full", "wb") as full:
            p = subprocess.run([sys.executable, "-m", "mccs.cli", "recv", "-c", str(cfg), "--as", "R"],
                               stdout=full, stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 2 and b"stays on RECV_LIST" in p.stderr, p.stderr
        rc, _, _ = mccs("recv", "-c", cfg, "--as", "R", "--out", tmp_path / "msg.bin")
        assert rc == 0 and (tmp_path / "msg.bin").read_bytes() == b"keep me"
        assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize("text, message", [
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\nbufers = 3\n', "unknown key 'bufers'"),
    ('[host]\nid = "A A"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n', "invalid host id"),
    ('[host]\nid = "AA"\ncheckpoint = "c"\ntrace_dir = "t"\n', "missing key 'socket'"),
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\nbuffers = "many"\n', "buffers"),
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n[[line]]\npeer = "BB"\n'
     'port = "p"\nprotocol = "x25"\n', "protocol = 'x25'"),
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n[[line]]\npeer = "BB"\n'
     'port = "p"\nwindow = 200\n', "window = 200"),
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n[[line]]\npeer = "BB"\n'
     'port = "p"\nack_hold = 2\n', "ack_hold = 2"),
    ('[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n[[line]]\npeer = "BB"\n'
     'port = "p"\nspeed = 9600\n', "unknown key 'speed'"),
    ('[host\n', "Expected"),
    # tracebacks before (an adversarial test): bytes that are not UTF-8, an array of numbers where
    # tables belong, a NUL in a path, arrays nested past Python's recursion limit
    (b'[host]\nid = "AA"\nsocket = "s\xff"\ncheckpoint = "c"\ntrace_dir = "t"\n', "not UTF-8"),
    ('line = [1, 2]\n[host]\nid = "AA"\nsocket = "s"\ncheckpoint = "c"\ntrace_dir = "t"\n', "array of tables"),
    ('[host]\nid = "AA"\nsocket = "s\\u0000x"\ncheckpoint = "c"\ntrace_dir = "t"\n', "NUL"),
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    ('[host]\nid = "AA"\nsocket = "/tmp/%s"\ncheckpoint = "c"\ntrace_dir = "t"\n' % ("s" * 120), "socket = "),
])
def test_bad_config_names_key_and_reason(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match=message):
        load(path)
    rc, _, err = mccs("daemon", "-c", path)
    assert rc == 2 and message.split()[0].strip("'") in err


def test_config_paths_relative_to_file(tmp_path):
    cfg = load(write_config(tmp_path / "etc", "AA", [{"peer": "BB", "port": "socket://127.0.0.1:9"}]))
    assert cfg.checkpoint == str((tmp_path / "etc" / "AA.db").resolve())
    assert cfg.lines[0].port == "socket://127.0.0.1:9" and cfg.lines[0].reply_timeout == 3.0


@pytest.mark.parametrize("damage", ["DROP TABLE send_list", "ALTER TABLE recv_list DROP COLUMN priority",
                                    "DELETE FROM meta WHERE key = 'next_msg_id'"])
def test_a_checkpoint_that_cannot_be_restored_is_a_clear_error(tmp_path, damage):
    """Tables or rows not as MCCS wrote them (edited by hand, say) made `mccs daemon` print a
    traceback (an adversarial test); now it says what is wrong and what to do, exit 2."""
    import sqlite3
    cfg = write_config(tmp_path, "AA", [])
    with DaemonProcess(cfg) as d:
        mccs("send", "-c", cfg, "--as", "S", "AAR", "stored")
        path = d.cfg.checkpoint
    with sqlite3.connect(path) as conn:
        conn.execute(damage)
    rc, _, err = mccs("daemon", "-c", cfg)
    assert rc == 2 and "cannot be restored" in err and "Traceback" not in err, err
