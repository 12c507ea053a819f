"""The one presentation of leasectl's results, for the CLI and the console alike."""
