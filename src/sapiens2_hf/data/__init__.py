"""Layer-1 data tooling: label tables, dataset adapters, transforms, collators and synthetic humans."""
