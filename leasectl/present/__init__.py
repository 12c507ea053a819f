"""The one presentation of leasectl's models, for the CLI and the console (Rich renderables and phrases; no Textual)."""
