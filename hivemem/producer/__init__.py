"""The SDK: thin handles over the service (`hivemem.service`): `MemoryClient`,
`ScopedMemory`, `Admin`, their async twins and the remote (HTTP) client."""
