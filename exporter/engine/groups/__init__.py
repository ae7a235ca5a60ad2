"""Resource groups (PIP-82): which groups apply (`applicable`), the usage each exporter
reports and receives (`usage`, `participant`), the quota calculators (`pulsarcalc`,
`allocators`, `brokersplits`) and the throttle they imply (`throttle`)."""
