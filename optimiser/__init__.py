"""appopt's optimiser: the application spec, the catalog, the planner and the command line."""
