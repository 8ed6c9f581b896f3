"""Everything that names a host file.

* :mod:`~qosmanager.host.roots` -- where cgroup, proc and sys are mounted (all injectable);
* :mod:`~qosmanager.host.cgroups` -- cgroup version and driver detection, the kubepods
  path layout of pods, containers and host applications;
* :mod:`~qosmanager.host.resources` -- the registry of writable files (v1/v2 mapping,
  validators, rendering);
* :mod:`~qosmanager.host.cpuset` -- kernel CPU lists;
* :mod:`~qosmanager.host.procfs` / :mod:`~qosmanager.host.sysfs` -- node stat, memory,
  PSI, CPU topology and NUMA parsers;
* :mod:`~qosmanager.host.resctrl` -- resctrl paths, schemata and the CAT/MBA formulas.
* :mod:`~qosmanager.host.blockdev` -- block devices from sysfs and mountinfo (disk numbers for blkio).
"""
