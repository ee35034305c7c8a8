"""The Dynamic Resource Allocation (DRA) driver framework: kind-neutral, like ``deviceplugin``.

A driver is a profile (:class:`~intel_device_plugins.dra.profile.DriverProfile`): a scan that turns a
filesystem root into :class:`~intel_device_plugins.dra.model.Inventory`, plus the CDI edits a claim's
devices get. The framework publishes the inventory as ResourceSlices, registers with the kubelet,
serves ``NodePrepareResources``/``NodeUnprepareResources`` and the health stream, and keeps a
checkpoint so a restarted driver can undo what an earlier one prepared.
"""
