"""The GPU's clock, power, temperature and throttle counters around a timed
block, read through NVML (libnvidia-ml.so.1, loaded with ctypes: no Python
package needed). bench/peers/timing.py samples them before and after each
implementation's block of replays, so that a block slowed by the GPU (power or
thermal capping, a lowered SM clock) shows in the result JSON beside its
timings instead of passing for the implementation's own spread.

NVML calls used (NVIDIA's NVML API reference, nvml.h): nvmlInit_v2,
nvmlDeviceGetHandleByPciBusId_v2 (or ..ByIndex_v2), nvmlDeviceGetClockInfo
(NVML_CLOCK_SM = 1, MHz), nvmlDeviceGetPowerUsage (mW),
nvmlDeviceGetTemperature (NVML_TEMPERATURE_GPU = 0, degrees C),
nvmlDeviceGetViolationStatus (NVML_PERF_POLICY_POWER = 0, _THERMAL = 1:
cumulative ns the clocks were held down by that policy), and
nvmlDeviceGetCurrentClocksEventReasons (older drivers:
..ClocksThrottleReasons; a bit mask).
"""
import ctypes


class _Violation(ctypes.Structure):
    _fields_ = [("referenceTime", ctypes.c_ulonglong), ("violationTime", ctypes.c_ulonglong)]


class GpuState:
    """One GPU's NVML handle. open() returns None where NVML or the device is
    missing (a machine without a GPU, CI): callers then record nothing."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._h = handle
        reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    @classmethod
    def open(cls, pci_bus_id=None, index=0, libname="libnvidia-ml.so.1"):
        """The GPU with this PCI bus id ("0000:1b:00.0", as torch's device
        properties give it), else (no bus id given) NVML's device `index`.
        None on any NVML error (missing library, no device, init failure,
        an unknown bus id)."""
        try:
            lib = ctypes.CDLL(libname)
            if lib.nvmlInit_v2() != 0:
                return None
            h = ctypes.c_void_p()
            # NVML numbers GPUs in its own order, blind to CUDA_VISIBLE_DEVICES:
            # a bus id that NVML does not know is no GPU at all, not index 0.
            if pci_bus_id:
                rc = lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(h))
            else:
                rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(h))
            return cls(lib, h) if rc == 0 else None
        except (OSError, AttributeError):
            return None

    def _uint(self, fn, *args):
        v = ctypes.c_uint()
        return v.value if fn(self._h, *args, ctypes.byref(v)) == 0 else None

    def _violation_ns(self, policy):
        v = _Violation()
        return v.violationTime if self._lib.nvmlDeviceGetViolationStatus(self._h, policy, ctypes.byref(v)) == 0 else None

    def sample(self):
        """dict: sm_mhz, power_w, temp_c, power_violation_ns,
        thermal_violation_ns (cumulative), reasons (bit mask); a field NVML
        cannot give is None."""
        mw = self._uint(self._lib.nvmlDeviceGetPowerUsage)
        reasons = None
        if self._reasons is not None:
            r = ctypes.c_ulonglong()
            reasons = r.value if self._reasons(self._h, ctypes.byref(r)) == 0 else None
        return {
            "sm_mhz": self._uint(self._lib.nvmlDeviceGetClockInfo, ctypes.c_int(1)),
            "power_w": None if mw is None else mw / 1000.0,
            "temp_c": self._uint(self._lib.nvmlDeviceGetTemperature, ctypes.c_int(0)),
            "power_violation_ns": self._violation_ns(0),
            "thermal_violation_ns": self._violation_ns(1),
            "reasons": reasons,
        }


def accumulate(acc, before, after):
    """Fold one timed block (samples `before` and `after` it) into `acc`, an
    implementation's running summary (a dict, updated and returned):
    power_violation_ms / thermal_violation_ms (sums of the counters' growth
    over the blocks), sm_mhz_min / sm_mhz_max, power_w_max, temp_c_max (over
    the samples), reasons_or (every reasons mask seen, OR-ed), blocks. Fields
    with no data stay absent. A counter that goes backwards (a driver reset)
    adds nothing."""
    if before is None or after is None:
        return acc
    acc["blocks"] = acc.get("blocks", 0) + 1
    for key, out in (("power_violation_ns", "power_violation_ms"), ("thermal_violation_ns", "thermal_violation_ms")):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None:
            acc[out] = acc.get(out, 0.0) + max(0, b - a) / 1e6
    for s in (before, after):
        if s.get("sm_mhz") is not None:
            acc["sm_mhz_min"] = min(acc.get("sm_mhz_min", s["sm_mhz"]), s["sm_mhz"])
            acc["sm_mhz_max"] = max(acc.get("sm_mhz_max", s["sm_mhz"]), s["sm_mhz"])
        for key, out in (("power_w", "power_w_max"), ("temp_c", "temp_c_max")):
            if s.get(key) is not None:
                acc[out] = max(acc.get(out, s[key]), s[key])
        if s.get("reasons") is not None:
            acc["reasons_or"] = acc.get("reasons_or", 0) | s["reasons"]
    return acc
