"""Device health from what the hardware says: findings, the policy that turns them into each device's
health, and the sources that produce them (xpumd's device-info API, kernel signals in sysfs).

Shared by the device plugins and the DRA drivers; nothing here imports either framework's shell, so the
package can move as a unit.
"""
