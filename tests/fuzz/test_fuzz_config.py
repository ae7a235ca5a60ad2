"""Fuzz: config files. examples/reference.yaml (every key, its file paths pointing at files
that exist) and the demo's config, mutated as YAML text through `load` and as loaded
mappings through `parse`: a config loads, or `ConfigError` says what is wrong, each line
`FILE: key.path: message` (or `FILE: line N: …` for what precedes the keys) — what
`validate-config` prints before exiting with 2."""

from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz import inputs
from tests.fuzz.brokerserver import byte_ops

tree_ops = st.lists(st.tuples(st.integers(0, inputs.TREE_OPS - 1), st.integers(0, 1 << 20),
                              st.integers(0, 1 << 20)), min_size=1, max_size=4)


def test_every_seed_loads() -> None:
    for text in inputs.config_texts():
        assert inputs.config_file(text, inputs.config_path()).accepted == 1
    for data in inputs.config_mappings():
        assert inputs.config_mapping(data).accepted == 1


@inputs.fuzz_settings(1.25)
@given(seed=st.sampled_from(inputs.config_texts()), ops=byte_ops)
def test_a_mutated_file_loads_or_fails_naming_file_and_key_path(seed: bytes, ops: list) -> None:
    text = inputs.apply_bytes(seed, ops, inputs.CONFIG_WORDS)
    outcome = inputs.tolerating_known(lambda: inputs.config_file(text, inputs.config_path()))
    if outcome is not None:
        event(f"rejected: {next(iter(outcome.rejected))}" if outcome.rejected else "accepted")


@inputs.fuzz_settings(5)
@given(seed=st.sampled_from(inputs.config_mappings()), ops=tree_ops)
def test_a_mutated_mapping_parses_or_fails_naming_file_and_key_path(seed: dict,
                                                                     ops: list) -> None:
    data = inputs.apply_tree(seed, ops, inputs.CONFIG_VALUES, inputs.CONFIG_KEYS)
    outcome = inputs.tolerating_known(lambda: inputs.config_mapping(data))
    if outcome is not None:
        event(f"rejected: {next(iter(outcome.rejected))}" if outcome.rejected else "accepted")
