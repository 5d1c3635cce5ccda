"""Every on-disk format (pyarrow and the stdlib, never the extension): the provenance's stored
form, and the layouts the recording rooms write and read."""
