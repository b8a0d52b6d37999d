"""REST API, schemas and command line of dsdoctor."""
