"""The versioned adapter store, read and written by everything that handles adapter versions.

The learner commits screened candidates into it and activates the promoted ones; the policy
node preloads, looks up and rolls back versions through it; ``simreal models`` lists, shows
and rolls back. Plain Python (no rclpy).

Entry points: ``store.AdapterStore`` (``<root>/<version>/`` plus ``active.json``: which
version runs and the history of activations), ``store.StoredVersion``, ``store.StoreError``.
"""
