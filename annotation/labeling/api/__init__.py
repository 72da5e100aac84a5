"""HTTP doors of the labeling slice: the queue (the token door), the workspace, history."""
