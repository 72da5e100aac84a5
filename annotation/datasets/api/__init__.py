"""HTTP doors of the datasets slice: imports, snapshots and exports, evaluation sets."""
