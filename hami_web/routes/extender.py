"""Placeholder until the extender lands (issue 4)."""

from flask import Blueprint

blueprint = Blueprint("extender", __name__)
