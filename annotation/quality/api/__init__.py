"""HTTP doors of the quality slice: review, gold, machine quality."""
