"""The pipeline's shape: `topology` (every Redis key, the stages with their streams, groups
and partitions), `messages` (every stream entry as a typed message with one codec) and
`vectors` (the one vector codec). A new field or stage is one edit here."""
