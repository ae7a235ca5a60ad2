"""Generated artefacts: everything here is derived from the catalogue (one source of truth)."""
