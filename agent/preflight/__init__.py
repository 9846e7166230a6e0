"""What the command line checks before a night, and what it keeps in order around one:
`check` (`nightshift check`: the program and the script run as a night would, one `checks.Check`
line each, with the fix), `prestart` (what `run` refuses before it writes anything), `lock` (one
loop per tag), `leftovers` (a killed harness's runs and jobs ended), `run_length` (a run's
length from its progress lines), `knob_probe` (each knob proven live before a night),
`exposure` (which files hold the held-out bytes), `failures` (disk and git errors in words)."""
