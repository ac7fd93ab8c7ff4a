"""Reports: the versioned JSON metrics documents of jobs (DESIGN §7)."""
