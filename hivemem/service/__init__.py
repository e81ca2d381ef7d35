"""The service between the SDK handles and the stores (see `hivemem.service.core`)."""
