# The parts of gunicorn hami-web builds on (gunicorn ships no type information); tests/test_front_gunicorn_internals.py
# checks at run time that these names still exist with the shape we use.
__version__: str
