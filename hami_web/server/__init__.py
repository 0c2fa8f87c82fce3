"""Process assembly: the Flask app factory, the runtime threads, and gunicorn serving over TLS."""
