"""The lifecycle model (issue 27, item 8): random programs of registry
lifecycle steps, each run in a child interpreter and judged against a small
model of the registry. See doc/design.md#the-lifecycle-model."""
