"""The pipeline-balance payload (PPB): layer descriptions, switch profiles and fronts, SAPP's JSON format."""
