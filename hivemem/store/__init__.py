"""Stores: Redis (streams, session state) and Qdrant (vectors). Replies are decoded here only."""
