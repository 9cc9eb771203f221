"""A node process for test_supervision.py's standby test: waits for the runner's handover
like ``nodes.runtime.run_node``, then writes its pid to $STANDBY_TEST_DIR and runs until
it is stopped."""

import os
import sys
import time
from pathlib import Path

from simreal_ros.graph.processes import wait_for_handover

if __name__ == "__main__":
    if not wait_for_handover():
        sys.exit(0)
    (Path(os.environ["STANDBY_TEST_DIR"]) / str(os.getpid())).write_text("running")
    while True:
        time.sleep(0.1)
