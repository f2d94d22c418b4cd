"""Every table the chain stores: DataFrame conversions, each with its columns and units."""
