"""The one presentation of leasectl's models for the CLI and the console (Rich; no Textual)."""
