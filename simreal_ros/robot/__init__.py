"""The arm: MJCF model and the description (joint order, limits) every node uses."""
