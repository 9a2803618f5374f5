package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static void *cuda;
static CUresult (*pInit)(unsigned int);
static CUresult (*pDeviceGet)(CUdevice *, int);
static CUresult (*pCtxCreate)(CUcontext *, unsigned int, CUdevice);
static CUresult (*pMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*pMemFree)(CUdeviceptr);
static CUresult (*pCtxDestroy)(CUcontext);

// Loads libcuda.so.1 the way a CUDA program does, without CUDA headers.
static int load(void) {
	cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) return -1;
	pInit = dlsym(cuda, "cuInit");
	pDeviceGet = dlsym(cuda, "cuDeviceGet");
	pCtxCreate = dlsym(cuda, "cuCtxCreate_v2");
	pMemAlloc = dlsym(cuda, "cuMemAlloc_v2");
	pMemFree = dlsym(cuda, "cuMemFree_v2");
	pCtxDestroy = dlsym(cuda, "cuCtxDestroy_v2");
	if (!pInit || !pDeviceGet || !pCtxCreate || !pMemAlloc || !pMemFree || !pCtxDestroy) return -2;
	return 0;
}
static CUresult cuInit0(void) { return pInit(0); }
static CUresult ctxOn(int ordinal, CUcontext *ctx) {
	CUdevice dev; CUresult r = pDeviceGet(&dev, ordinal);
	if (r) return r;
	return pCtxCreate(ctx, 0, dev);
}
static CUresult alloc(CUdeviceptr *p, size_t n) { return pMemAlloc(p, n); }
static CUresult release(CUdeviceptr p) { return pMemFree(p); }
static CUresult ctxDestroy(CUcontext c) { return pCtxDestroy(c); }
*/
import "C"

import "fmt"

// cudaAllocation holds device memory on one GPU through libcuda.
type cudaAllocation struct {
	ctx C.CUcontext
	ptr C.CUdeviceptr
}

// cudaAlloc creates a context on the GPU with CUDA ordinal `ordinal` and
// allocates bytes on it.
func cudaAlloc(ordinal int, bytes uint64) (*cudaAllocation, error) {
	switch C.load() {
	case -1:
		return nil, fmt.Errorf("libcuda.so.1 not found: the driver's CUDA library is needed for the allocation check")
	case -2:
		return nil, fmt.Errorf("libcuda.so.1 lacks cuInit/cuCtxCreate_v2/cuMemAlloc_v2")
	}
	if r := C.cuInit0(); r != 0 {
		return nil, fmt.Errorf("cuInit: CUDA error %d", int(r))
	}
	a := &cudaAllocation{}
	if r := C.ctxOn(C.int(ordinal), &a.ctx); r != 0 {
		return nil, fmt.Errorf("cuCtxCreate on device %d: CUDA error %d", ordinal, int(r))
	}
	if r := C.alloc(&a.ptr, C.size_t(bytes)); r != 0 {
		C.ctxDestroy(a.ctx)
		return nil, fmt.Errorf("cuMemAlloc %d bytes: CUDA error %d", bytes, int(r))
	}
	return a, nil
}

func (a *cudaAllocation) free() error {
	if r := C.release(a.ptr); r != 0 {
		return fmt.Errorf("cuMemFree: CUDA error %d", int(r))
	}
	if r := C.ctxDestroy(a.ctx); r != 0 {
		return fmt.Errorf("cuCtxDestroy: CUDA error %d", int(r))
	}
	return nil
}
