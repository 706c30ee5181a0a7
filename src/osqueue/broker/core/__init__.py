"""The broker's core: the facade, intake, the group-commit loop, lifecycle,
long polls, wakeups, side tasks, storage retry."""
