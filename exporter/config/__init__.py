"""The YAML contract. `model` holds the frozen dataclasses every stage reads; `load` reads and
validates a file into them (with `reader`, `values`, `sections`, `auth`, `units`); `reload`
watches the file. The engine and the stages import the model only, never the loader."""
