"""MuJoCo arm simulation core: physics, tasks, profiles, environments, scripted experts."""
