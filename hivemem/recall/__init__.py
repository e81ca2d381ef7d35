"""The read path: recall's candidates, scoring, packing and explanation, and the caches it
keeps between recalls (known facts, currency). `producer/` holds the SDK only."""
