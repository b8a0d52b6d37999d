"""The shapes of rule, symptom and observation IDs (regular expressions), with nothing heavy to import:
the schema validates with them, the lexicon checks its compositions against them."""

RULE_ID = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
SYMPTOM_ID = r"^s\.[a-z0-9_]+$"
OBSERVATION_KEY = r"^x\.[a-z0-9_]+=[a-z0-9_]+$"
FIELD_NAME = r"^[a-z][a-z0-9_]*$"
