"""HTTP doors of the data manager: chains, one chain, bulk actions."""
