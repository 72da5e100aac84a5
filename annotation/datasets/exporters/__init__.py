"""Export writers: a snapshot's examples in the formats PRM trainers and tools read. Pure
Python over ``SnapshotExample`` (no database), so they are unit-tested and benchmarked
alone, as the importers are; ``annotation.datasets.exports`` reads the snapshot and hands
its examples here."""
