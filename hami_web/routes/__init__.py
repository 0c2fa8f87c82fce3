"""HTTP shell: Flask blueprints that decode a request, call the core or the cache, and encode the answer."""
