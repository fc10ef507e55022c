"""The group's shared config (config sync): the bundle (a config and every file it names,
as one unit, and its form on the wire), the shelf of bundles a member holds on disk, and a
member's side of it (which config it starts with, what it publishes and runs). The peers'
exchange of bundles (`sync.configsync`) carries it; it imports the config model, never the
reverse."""
