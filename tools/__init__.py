"""Test-only helpers of the checkout, never installed: `hostsim` (daemon kernels in memory on a
virtual clock). What an installed `mccs` runs is in mccs/testbed/ and mccs/analytics/."""
