/*
 * A stand-in libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * It implements the symbols collectors/nvml.py reaches through pynvml, with the struct
 * layouts pynvml's ctypes declarations expect (checked by the static asserts below), and,
 * answering NOT_SUPPORTED (or no graphics processes), the others nvitop asks for, so that
 * benchmarks/bench_ui_cpu.py can run nvitop over the same library. Devices look like
 * B200s: 183359 MiB total, 512 MiB reserved by the driver.
 *
 * Build:  gcc -shared -fPIC -O1 -o libnvidia-ml.so.1 fake_nvml.c
 *   -DNO_MEMORY_V2     leave out nvmlDeviceGetMemoryInfo_v2 (pynvml: FunctionNotFound)
 *   -DNO_PROCESSES_V3  leave out nvmlDeviceGetComputeRunningProcesses_v3 (old driver;
 *                      pynvml's unversioned call then raises NVMLLibraryMismatchError)
 *   -DNO_CLOCKS_EVENT_REASONS  leave out nvmlDeviceGetCurrentClocksEventReasons (a driver
 *                      before 535 has only ...ClocksThrottleReasons)
 *   -DNO_TEMPERATURE_V leave out nvmlDeviceGetTemperatureV (only the older ...Temperature)
 *
 * Environment, read at init:
 *   FAKE_NVML_INIT_RC    init returns this code (9 DriverNotLoaded, 4 NoPermission,
 *                        18 LibRmVersionMismatch, ...); 0 or unset = success
 *   FAKE_NVML_COUNT      number of devices (default 2, at most 16)
 *   FAKE_NVML_NO_FIELDS  non-empty and not "0": every field value answers NOT_SUPPORTED
 *   FAKE_NVML_DELAY_MS   each device handle lookup (one per device per sample) takes this
 *                        long, as a busy driver or a GPU behind a slow bus does
 *   FAKE_NVML_STATE_FILE path of a state file, re-read on every device call, so a test
 *                        can change values between samples. One setting per line:
 *
 *     # comment
 *     <dev> used <bytes>              memory in use, excluding reserved (v2 semantics)
 *     <dev> util <gpu%> <mem%>
 *     <dev> power <mW>
 *     <dev> limit <mW>                enforced power limit
 *     <dev> pcie <tx B/s> <rx B/s>    slope of the cumulative PCIe byte counters
 *     <dev> pcie32                    the PCIe byte counters are 32 bits wide (value type
 *                                     unsigned int, wrapping at 2^32 bytes), as an H200
 *                                     on driver 580.159.04 answers them
 *     <dev> snapshot <tx KB/s> <rx KB/s>  what nvmlDeviceGetPcieThroughput answers
 *     <dev> noprocs                   no compute processes
 *     <dev> proc <pid> <bytes|na>     a compute process (replaces the default list;
 *                                     "na" = NVML_VALUE_NOT_AVAILABLE)
 *     <dev> temp <C>                  GPU core temperature
 *     <dev> clocks <sm MHz> <mem MHz>
 *     <dev> reasons <mask>            clock-event (throttle) reasons bitmask, 0x.. or decimal
 *     <dev> energy <mJ>               the energy counter, fixed (by default it grows at
 *                                     the power draw from 5e9 mJ at init)
 *     <dev> link <gen> <width>        current PCIe link (the maximum stays Gen5 x16)
 *     <dev> replay <count>            PCIe replay counter
 *     <dev> nvlink <tx B/s> <rx B/s>  slope of the NVLink data counters (all links)
 *     <dev> ecc <corrected> <uncorrected>  volatile ECC error counts
 *     <dev> xid <n>                   an XID critical error; each line is one event,
 *                                     delivered once to a registered event set
 *     <dev> fail <call> <rc>          make one call return rc; call is one of
 *                                     handle name uuid memory memory_v2 utilization
 *                                     power limit throughput fields processes
 *                                     temperature clocks clock_events energy pcie_link
 *                                     replay ecc events nvlink (nvlink: the NVLink
 *                                     field values only)
 *
 *   <dev> is a device index or "*" for every device. Unknown lines are ignored.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MIB (1024ULL * 1024ULL)
#define MAX_DEVICES 16
#define MAX_PROCS 8
#define MAX_XIDS 16
#define MAX_EVENT_SETS 32
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define FI_PCIE_COUNT_TX_BYTES 197
#define FI_PCIE_COUNT_RX_BYTES 198
#define FI_NVLINK_THROUGHPUT_DATA_TX 138 /* KiB, cumulative */
#define FI_NVLINK_THROUGHPUT_DATA_RX 139
#define NVLINK_LINKS 18 /* NVLink 5 on a B200 */
#define ALL_LINKS 0xFFFFFFFFu /* scopeId: the sum over every link */
#define EVENT_XID_CRITICAL 0x8ULL
#define VALUE_TYPE_UNSIGNED_INT 1
#define VALUE_TYPE_UNSIGNED_LONG_LONG 3

/* ---- layouts, as declared in nvml.h and mirrored by pynvml's ctypes classes ---- */

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* same layout for _v2 and _v3 */

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp; /* microseconds, wall clock */
    long long latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_t;
#define nvmlTemperature_v1 ((unsigned int)(sizeof(nvmlTemperature_t) | (1u << 24)))

typedef struct {
    struct nvmlDevice_st *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(nvmlTemperature_v1 == 0x100000C, "nvmlTemperature_v1 version");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2 version");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
_Static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t.value");

/* ---- the fake devices ---- */

enum { F_HANDLE, F_NAME, F_UUID, F_MEMORY, F_MEMORY_V2, F_UTILIZATION, F_POWER, F_LIMIT,
       F_THROUGHPUT, F_FIELDS, F_PROCESSES, F_TEMPERATURE, F_CLOCKS, F_CLOCK_EVENTS,
       F_ENERGY, F_PCIE_LINK, F_REPLAY, F_ECC, F_EVENTS, F_NVLINK, F_COUNT };
static const char *const call_names[F_COUNT] = {
    "handle", "name", "uuid", "memory", "memory_v2", "utilization", "power", "limit",
    "throughput", "fields", "processes", "temperature", "clocks", "clock_events",
    "energy", "pcie_link", "replay", "ecc", "events", "nvlink"};

struct nvmlDevice_st {
    unsigned int index;
    unsigned long long total, reserved, used;
    unsigned int util_gpu, util_mem, power_mw, limit_mw;
    unsigned long long pcie_tx_rate, pcie_rx_rate; /* bytes/s, slope of the counters */
    int pcie_32bit; /* the counters wrap at 2^32 and answer as unsigned int */
    unsigned int snap_tx_kbps, snap_rx_kbps;
    unsigned int nprocs;
    unsigned int pids[MAX_PROCS];
    unsigned long long proc_bytes[MAX_PROCS];
    unsigned int temp_c, sm_mhz, mem_mhz;
    unsigned long long clock_events;
    int energy_fixed; /* the state file gave the counter's value */
    unsigned long long energy_mj;
    unsigned int link_gen, link_width, replays;
    unsigned long long nvlink_tx_rate, nvlink_rx_rate; /* bytes/s */
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned int nxids;
    unsigned int xids[MAX_XIDS];
    nvmlReturn_t fail[F_COUNT];
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st devices[MAX_DEVICES];
static unsigned int device_count;
static int initialised;
static int no_fields;
static long long epoch_us; /* counters start at zero at init */
/* Outside the devices, which load_state rebuilds on every call: how many of each device's
 * XID lines an event set has already delivered, and the sets. */
static unsigned int xids_delivered[MAX_DEVICES];
struct nvmlEventSet_st {
    int in_use;
    unsigned int devices; /* bit i: device i registered for XID events */
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;
static struct nvmlEventSet_st event_sets[MAX_EVENT_SETS];
static char state_file[4096];

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void set_defaults(struct nvmlDevice_st *d, unsigned int i) {
    memset(d, 0, sizeof *d);
    d->index = i;
    d->total = 183359ULL * MIB;
    d->reserved = 512ULL * MIB;
    d->used = (150000ULL + 1000ULL * i) * MIB;
    d->util_gpu = 87;
    d->util_mem = 41;
    d->power_mw = 650000 + 1000 * i;
    d->limit_mw = 1000000;
    d->pcie_tx_rate = 2500000000ULL;
    d->pcie_rx_rate = 12000000000ULL;
    d->snap_tx_kbps = 2000000;
    d->snap_rx_kbps = 10000000;
    d->nprocs = 1;
    /* Above Linux's PID_MAX_LIMIT (2^22): no process of this host can have it, as a pid
     * the driver gives from another PID namespace (the stub has no process of its own). */
    d->pids[0] = 4194304 + 4242 + i;
    d->proc_bytes[0] = d->used - 200ULL * MIB;
    d->temp_c = 62 + i;
    d->sm_mhz = 1965;
    d->mem_mhz = 3996;
    d->link_gen = 5;
    d->link_width = 16;
    d->nvlink_tx_rate = 40000000000ULL;
    d->nvlink_rx_rate = 38000000000ULL;
}

static void apply_line(struct nvmlDevice_st *d, const char *key, const char *a, const char *b,
                       int *procs_replaced) {
    if (!strcmp(key, "used") && a) d->used = strtoull(a, NULL, 10);
    else if (!strcmp(key, "util") && a && b) { d->util_gpu = atoi(a); d->util_mem = atoi(b); }
    else if (!strcmp(key, "power") && a) d->power_mw = strtoul(a, NULL, 10);
    else if (!strcmp(key, "limit") && a) d->limit_mw = strtoul(a, NULL, 10);
    else if (!strcmp(key, "pcie") && a && b) {
        d->pcie_tx_rate = strtoull(a, NULL, 10);
        d->pcie_rx_rate = strtoull(b, NULL, 10);
    } else if (!strcmp(key, "pcie32")) d->pcie_32bit = 1;
    else if (!strcmp(key, "snapshot") && a && b) {
        d->snap_tx_kbps = strtoul(a, NULL, 10);
        d->snap_rx_kbps = strtoul(b, NULL, 10);
    } else if (!strcmp(key, "noprocs")) d->nprocs = 0;
    else if (!strcmp(key, "proc") && a && b) {
        if (!*procs_replaced) { d->nprocs = 0; *procs_replaced = 1; }
        if (d->nprocs < MAX_PROCS) {
            d->pids[d->nprocs] = strtoul(a, NULL, 10);
            d->proc_bytes[d->nprocs] = strcmp(b, "na") ? strtoull(b, NULL, 10) : NOT_AVAILABLE;
            d->nprocs++;
        }
    } else if (!strcmp(key, "temp") && a) d->temp_c = strtoul(a, NULL, 10);
    else if (!strcmp(key, "clocks") && a && b) {
        d->sm_mhz = strtoul(a, NULL, 10);
        d->mem_mhz = strtoul(b, NULL, 10);
    } else if (!strcmp(key, "reasons") && a) d->clock_events = strtoull(a, NULL, 0);
    else if (!strcmp(key, "energy") && a) {
        d->energy_fixed = 1;
        d->energy_mj = strtoull(a, NULL, 10);
    } else if (!strcmp(key, "link") && a && b) {
        d->link_gen = strtoul(a, NULL, 10);
        d->link_width = strtoul(b, NULL, 10);
    } else if (!strcmp(key, "replay") && a) d->replays = strtoul(a, NULL, 10);
    else if (!strcmp(key, "nvlink") && a && b) {
        d->nvlink_tx_rate = strtoull(a, NULL, 10);
        d->nvlink_rx_rate = strtoull(b, NULL, 10);
    } else if (!strcmp(key, "ecc") && a && b) {
        d->ecc_corrected = strtoull(a, NULL, 10);
        d->ecc_uncorrected = strtoull(b, NULL, 10);
    } else if (!strcmp(key, "xid") && a) {
        if (d->nxids < MAX_XIDS) d->xids[d->nxids++] = strtoul(a, NULL, 10);
    } else if (!strcmp(key, "fail") && a && b) {
        for (int c = 0; c < F_COUNT; c++)
            if (!strcmp(a, call_names[c])) d->fail[c] = atoi(b);
    }
}

/* Defaults, then the state file on top; cheap enough to do on every call. */
static int delay_ms;

static void load_state(void) {
    int replaced[MAX_DEVICES] = {0};
    for (unsigned int i = 0; i < device_count; i++) set_defaults(&devices[i], i);
    if (!state_file[0]) return;
    FILE *f = fopen(state_file, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *save = NULL;
        char *dev = strtok_r(line, " \t\r\n", &save);
        if (!dev || dev[0] == '#') continue;
        char *key = strtok_r(NULL, " \t\r\n", &save);
        char *a = strtok_r(NULL, " \t\r\n", &save);
        char *b = strtok_r(NULL, " \t\r\n", &save);
        if (!key) continue;
        for (unsigned int i = 0; i < device_count; i++)
            if (!strcmp(dev, "*") || (unsigned int)atoi(dev) == i)
                apply_line(&devices[i], key, a, b, &replaced[i]);
    }
    fclose(f);
}

/* Common prologue of every device call: initialised, valid handle, injected failure. */
static nvmlReturn_t check(nvmlDevice_t d, int call) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (d < devices || d >= devices + device_count) return NVML_ERROR_INVALID_ARGUMENT;
    load_state();
    return d->fail[call];
}

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ---- init and system ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    const char *rc = getenv("FAKE_NVML_INIT_RC");
    if (rc && atoi(rc) != 0) return atoi(rc);
    const char *count = getenv("FAKE_NVML_COUNT");
    int n = count ? atoi(count) : 2;
    device_count = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (unsigned int)n;
    const char *nf = getenv("FAKE_NVML_NO_FIELDS");
    no_fields = nf && nf[0] && strcmp(nf, "0") != 0;
    const char *sf = getenv("FAKE_NVML_STATE_FILE");
    snprintf(state_file, sizeof state_file, "%s", sf ? sf : "");
    const char *delay = getenv("FAKE_NVML_DELAY_MS");
    delay_ms = delay ? atoi(delay) : 0;
    epoch_us = now_us();
    memset(xids_delivered, 0, sizeof xids_delivered);
    memset(event_sets, 0, sizeof event_sets);
    initialised = 1;
    load_state();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    initialised = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, "580.95.05");
}

/* ---- devices ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index >= device_count || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (delay_ms > 0) {
        struct timespec pause = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    load_state();
    if (devices[index].fail[F_HANDLE]) return devices[index].fail[F_HANDLE];
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    nvmlReturn_t rc = check(d, F_NAME);
    return rc ? rc : copy_string(name, length, "NVIDIA B200");
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    nvmlReturn_t rc = check(d, F_UUID);
    if (rc) return rc;
    char buf[64];
    snprintf(buf, sizeof buf, "GPU-fa4e0b20-0000-4000-8000-%012x", d->index);
    return copy_string(uuid, length, buf);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    nvmlReturn_t rc = check(d, F_MEMORY);
    if (rc) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    /* v1: "used" includes what the driver reserves. */
    memory->total = d->total;
    memory->used = d->used + d->reserved;
    memory->free = d->total - memory->used;
    return NVML_SUCCESS;
}

#ifndef NO_MEMORY_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = check(d, F_MEMORY_V2);
    if (rc) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = d->total;
    memory->reserved = d->reserved;
    memory->used = d->used;
    memory->free = d->total - d->reserved - d->used;
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    nvmlReturn_t rc = check(d, F_UTILIZATION);
    if (rc) return rc;
    if (!util) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = d->util_gpu;
    util->memory = d->util_mem;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    nvmlReturn_t rc = check(d, F_POWER);
    if (rc) return rc;
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = d->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    nvmlReturn_t rc = check(d, F_LIMIT);
    if (rc) return rc;
    if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
    *limit = d->limit_mw;
    return NVML_SUCCESS;
}

/* counter: 0 = NVML_PCIE_UTIL_TX_BYTES, 1 = NVML_PCIE_UTIL_RX_BYTES; answer in KB/s. */
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, unsigned int counter,
                                         unsigned int *value) {
    nvmlReturn_t rc = check(d, F_THROUGHPUT);
    if (rc) return rc;
    if (!value || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *value = counter == 0 ? d->snap_tx_kbps : d->snap_rx_kbps;
    return NVML_SUCCESS;
}

/* The whole call succeeds; each field carries its own return code, as in real NVML. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    nvmlReturn_t rc = check(d, F_FIELDS);
    if (rc) return rc;
    if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    long long ts = now_us();
    /* The counters grow at a fixed slope since init, so Δvalue/Δtimestamp is that slope. */
    double seconds = (double)(ts - epoch_us) / 1e6;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = ts;
        v->latencyUsec = 0;
        v->valueType = VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = 0;
        if (no_fields) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (v->fieldId == FI_PCIE_COUNT_TX_BYTES
                   || v->fieldId == FI_PCIE_COUNT_RX_BYTES) {
            double rate = (double)(v->fieldId == FI_PCIE_COUNT_TX_BYTES
                                   ? d->pcie_tx_rate : d->pcie_rx_rate);
            unsigned long long count = (unsigned long long)(rate * seconds);
            v->nvmlReturn = NVML_SUCCESS;
            if (d->pcie_32bit) {
                v->valueType = VALUE_TYPE_UNSIGNED_INT;
                v->value.uiVal = (unsigned int)(count & 0xffffffffULL);
            } else {
                v->value.ullVal = count;
            }
        } else if (v->fieldId == FI_NVLINK_THROUGHPUT_DATA_TX
                   || v->fieldId == FI_NVLINK_THROUGHPUT_DATA_RX) {
            /* KiB since init; one link (scopeId 0..17) carries an equal share. */
            double rate = (double)(v->fieldId == FI_NVLINK_THROUGHPUT_DATA_TX
                                   ? d->nvlink_tx_rate : d->nvlink_rx_rate);
            if (v->scopeId != ALL_LINKS) rate /= NVLINK_LINKS;
            v->nvmlReturn = d->fail[F_NVLINK] ? d->fail[F_NVLINK]
                : v->scopeId == ALL_LINKS || v->scopeId < NVLINK_LINKS
                    ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
            if (v->nvmlReturn == NVML_SUCCESS)
                v->value.ullVal = (unsigned long long)(rate * seconds / 1024.0);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* The two-call protocol: a too-small buffer gets INSUFFICIENT_SIZE and the needed count. */
static nvmlReturn_t running_processes(nvmlDevice_t d, unsigned int *count,
                                      nvmlProcessInfo_t *infos) {
    nvmlReturn_t rc = check(d, F_PROCESSES);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < d->nprocs || (d->nprocs > 0 && !infos)) {
        *count = d->nprocs;
        return d->nprocs ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int i = 0; i < d->nprocs; i++) {
        infos[i].pid = d->pids[i];
        infos[i].usedGpuMemory = d->proc_bytes[i];
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not MIG */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = d->nprocs;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(d, count, infos);
}

#ifndef NO_PROCESSES_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(d, count, infos);
}
#endif

/* What nvitop asks for besides: a CUDA version, no graphics processes, and for the rest
 * NOT_SUPPORTED (it shows N/A), as a driver without those features answers. */
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = 13000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    (void)infos;
    nvmlReturn_t rc = check(d, F_HANDLE);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

#define NOT_SUPPORTED_2(name, t1, t2) \
    nvmlReturn_t name(nvmlDevice_t d, t1 a, t2 b) { (void)a; (void)b; \
        nvmlReturn_t rc = check(d, F_HANDLE); return rc ? rc : NVML_ERROR_NOT_SUPPORTED; }
#define NOT_SUPPORTED_1(name, t1) \
    nvmlReturn_t name(nvmlDevice_t d, t1 a) { (void)a; \
        nvmlReturn_t rc = check(d, F_HANDLE); return rc ? rc : NVML_ERROR_NOT_SUPPORTED; }
NOT_SUPPORTED_1(nvmlDeviceGetComputeMode, int *)
NOT_SUPPORTED_2(nvmlDeviceGetDecoderUtilization, unsigned int *, unsigned int *)
NOT_SUPPORTED_2(nvmlDeviceGetEncoderUtilization, unsigned int *, unsigned int *)
NOT_SUPPORTED_1(nvmlDeviceGetDisplayActive, int *)
NOT_SUPPORTED_2(nvmlDeviceGetDriverModel, int *, int *)
NOT_SUPPORTED_1(nvmlDeviceGetFanSpeed, unsigned int *)
NOT_SUPPORTED_1(nvmlDeviceGetPciInfo_v3, void *)
NOT_SUPPORTED_1(nvmlDeviceGetPerformanceState, int *)
NOT_SUPPORTED_1(nvmlDeviceGetPersistenceMode, int *)
NOT_SUPPORTED_1(nvmlDeviceGetPowerManagementLimit, unsigned int *)

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, void *samples,
                                             unsigned int *count, unsigned long long since) {
    (void)samples; (void)count; (void)since;
    nvmlReturn_t rc = check(d, F_HANDLE);
    return rc ? rc : NVML_ERROR_NOT_SUPPORTED;
}


/* ---- health and interconnect ---- */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    nvmlReturn_t rc = check(d, F_TEMPERATURE);
    if (rc) return rc;
    if (!temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* 0: the GPU core */
    *temp = d->temp_c;
    return NVML_SUCCESS;
}

#ifndef NO_TEMPERATURE_V
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *temp) {
    nvmlReturn_t rc = check(d, F_TEMPERATURE);
    if (rc) return rc;
    if (!temp || temp->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (temp->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    temp->temperature = (int)d->temp_c;
    return NVML_SUCCESS;
}
#endif

/* type: 0 graphics, 1 SM, 2 memory, 3 video. */
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *clock) {
    nvmlReturn_t rc = check(d, F_CLOCKS);
    if (rc) return rc;
    if (!clock || type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = type == 2 ? d->mem_mhz : type == 3 ? 1710 : d->sm_mhz;
    return NVML_SUCCESS;
}

static nvmlReturn_t clock_events(nvmlDevice_t d, unsigned long long *reasons) {
    nvmlReturn_t rc = check(d, F_CLOCK_EVENTS);
    if (rc) return rc;
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = d->clock_events;
    return NVML_SUCCESS;
}

#ifndef NO_CLOCKS_EVENT_REASONS
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d,
                                                    unsigned long long *reasons) {
    return clock_events(d, reasons);
}
#endif

/* Every driver still has the old name. */
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
                                                       unsigned long long *reasons) {
    return clock_events(d, reasons);
}

/* mJ since the driver loaded: grows at the power draw (mW x s = mJ) unless fixed. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *energy) {
    nvmlReturn_t rc = check(d, F_ENERGY);
    if (rc) return rc;
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    double seconds = (double)(now_us() - epoch_us) / 1e6;
    *energy = d->energy_fixed ? d->energy_mj
        : 5000000000ULL + (unsigned long long)((double)d->power_mw * seconds);
    return NVML_SUCCESS;
}

/* which: 0 current generation, 1 current width; the maximum is a B200's Gen5 x16. */
static nvmlReturn_t link_value(nvmlDevice_t d, int which, unsigned int *out) {
    nvmlReturn_t rc = check(d, F_PCIE_LINK);
    if (rc) return rc;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = which == 0 ? d->link_gen : which == 1 ? d->link_width : which == 2 ? 5 : 16;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return link_value(d, 0, gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return link_value(d, 1, width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return link_value(d, 2, gen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return link_value(d, 3, width);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *count) {
    nvmlReturn_t rc = check(d, F_REPLAY);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = d->replays;
    return NVML_SUCCESS;
}

/* error_type: 0 corrected, 1 uncorrected; counter_type: 0 volatile, 1 aggregate (the same
 * here: nothing from before this driver load). */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type,
                                         unsigned long long *count) {
    nvmlReturn_t rc = check(d, F_ECC);
    if (rc) return rc;
    if (!count || error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = error_type == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    return NVML_SUCCESS;
}

/* ---- events: XID critical errors, from the state file's xid lines ---- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!event_sets[i].in_use) {
            event_sets[i].in_use = 1;
            event_sets[i].devices = 0;
            *set = &event_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_UNKNOWN;
}

static int valid_set(nvmlEventSet_t set) {
    return set >= event_sets && set < event_sets + MAX_EVENT_SETS && set->in_use;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      nvmlEventSet_t set) {
    nvmlReturn_t rc = check(d, F_EVENTS);
    if (rc) return rc;
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & EVENT_XID_CRITICAL) set->devices |= 1u << d->index;
    return NVML_SUCCESS;
}

/* Never blocks, whatever the timeout: the collector only ever polls with 0 ms. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    (void)timeoutms;
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_set(set) || !data) return NVML_ERROR_INVALID_ARGUMENT;
    load_state();
    for (unsigned int i = 0; i < device_count; i++) {
        struct nvmlDevice_st *d = &devices[i];
        if (!(set->devices & (1u << i)) || xids_delivered[i] >= d->nxids) continue;
        memset(data, 0, sizeof *data);
        data->device = d;
        data->eventType = EVENT_XID_CRITICAL;
        data->eventData = d->xids[xids_delivered[i]++];
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    set->in_use = 0;
    return NVML_SUCCESS;
}
