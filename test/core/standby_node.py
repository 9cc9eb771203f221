"""A node process for test_supervision.py's standby and readiness tests: waits for the
runner's handover and reports itself ready like ``nodes.runtime.run_node``, then writes its
pid to $STANDBY_TEST_DIR and runs until it is stopped ($STANDBY_TEST_NOT_READY: it never
reports itself ready)."""

import os
import sys
import time
from pathlib import Path

from simreal_ros.graph.processes import notify_ready, wait_for_handover

if __name__ == "__main__":
    if not wait_for_handover():
        sys.exit(0)
    if not os.environ.get("STANDBY_TEST_NOT_READY"):
        notify_ready()
    (Path(os.environ["STANDBY_TEST_DIR"]) / str(os.getpid())).write_text("running")
    while True:
        time.sleep(0.1)
