"""The largest value either limit on moves takes (`maxMovesPerMinute`, `maxMovesPerDecision`), wherever it is set:
`bridge controller`'s flags, the policy ConfigMap, the chart's values schema (a test holds the schema to it). Its
own module so the command line reads it without importing the controller."""

MOST_MOVES = 100_000
