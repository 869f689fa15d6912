"""The host's core, sans-I/O (the paper's Figure 2): requests, line bytes and the clock in; a
pass's Effects (checkpoint changes, traces, replies, line bytes) out.

    kernel       the host: one pass = Message-Receiver, Process-Dispatcher, Message-Sender
    lists        MSGBLOK, PRQBLOK and the WAIT_LIST, SEND_LIST and RECV_LIST
    dispatcher   the Process-Dispatcher: SENDs and RECVs on WAIT_LIST
    lines        the Line Control Blocks and the Message-Sender
    receiver     the Message-Receiver: arrivals to RECV_LIST, or on to the next host
    machine      the seam to a line's protocol machine (linedrivers)
    routing, envelope, pairs, epochs, segments, msgids   routing and exactly once across hosts
    notices, control, delivery, queue, sessions, requests, effects

Nothing here does I/O or imports the shell, the client, the CLI, the testbed or analytics
(tests/unit/test_layout.py holds it to that); mccs.daemon.driver performs what a pass returns.
"""
