"""`nmtk serve`: an HTTP server over a translator, batching concurrent requests (`worker`, `app`, `server`)."""
