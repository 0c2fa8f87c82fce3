"""Placeholder until the admission webhook lands (issue 5)."""

from flask import Blueprint

blueprint = Blueprint("webhook", __name__)
