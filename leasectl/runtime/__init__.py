"""The worker runtime and the stuck watcher, built on the data layer."""
