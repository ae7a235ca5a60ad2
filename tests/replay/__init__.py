"""Replays: stand-ins that serve recorded, documented real output of components that
cannot run here."""
