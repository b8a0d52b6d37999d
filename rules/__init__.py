"""Evidence rules: turn logs, metrics, ds_config and versions into observed symptoms."""
