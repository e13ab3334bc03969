// Builds ort_roi/kernels/cuda/roi_ops.cu for the host (g++), so the CUDA arithmetic is tested
// against the NumPy kernels on machines without a GPU: the grid-stride loop becomes a plain
// loop over every output element. Built by tests/fake_cupy.py (tests/test_cupy.py,
// tests/test_crop_and_resize.py) with -ffp-contract=off.
#include <cmath>
using std::ceil;
using std::floor;
using std::isnan;
using std::round;

#define ORT_ROI_HOST
#define ORT_ROI_LOOP(i, n) for (long long i = 0; i < (n); ++i)
#define ORT_ROI_DEVICE inline
#define __global__

#include "../ort_roi/kernels/cuda/roi_ops.cu"

#define ORT_ROI_EXPORT(T, S, CB)                                                              \
  extern "C" void max_pool_##S##_##CB(const T* X, const T* rois, T* out,                      \
                               long long n, int C, int H, int W, int PH, int PW, T s) {       \
    max_pool<T, CB>(X, rois, out, n, C, H, W, PH, PW, s);                                     \
  }                                                                                           \
  extern "C" void bilinear_pool_##S##_##CB(const T* X, const T* rois, T* out,                 \
                                    long long n, int C, int H, int W, int PH, int PW) {       \
    bilinear_pool<T, CB>(X, rois, out, n, C, H, W, PH, PW);                                   \
  }                                                                                           \
  extern "C" void psroi_pool_##S##_##CB(const T* X, const T* rows, T* out,                    \
                                 long long n, int Ci, int OC, int H, int W, int PH, int PW) { \
    psroi_pool<T, CB>(X, rows, out, n, Ci, OC, H, W, PH, PW);                                 \
  }                                                                                           \
  extern "C" void roi_align_##S##_##CB(const T* X, const T* rows, T* out, long long n,        \
                                       int C, int H, int W, int PH, int PW, int mode, T e,    \
                                       int ps) {                                              \
    roi_align<T, CB>(X, rows, out, n, C, H, W, PH, PW, mode, e, ps);                          \
  }                                                                                           \
  extern "C" void roi_align_levels_##S##_##CB(const T* X0, const T* X1, const T* X2,          \
                                              const T* X3, const T* X4, const T* X5,          \
                                              const T* rows, T* out, long long n, int C,      \
                                              int PH, int PW, int mode, T e) {                \
    roi_align_levels<T, CB>(X0, X1, X2, X3, X4, X5, rows, out, n, C, PH, PW, mode, e);        \
  }                                                                                           \
  extern "C" void roi_align_rotated_##S##_##CB(const T* X, const T* rois, T* out, long long n,\
                                        int C, int H, int W, int PH, int PW) {                \
    roi_align_rotated<T, CB>(X, rois, out, n, C, H, W, PH, PW);                               \
  }                                                                                           \
  extern "C" void crop_and_resize_##S##_##CB(const T* X, const int* geo, const float* w,      \
                                             float* out, long long n, int C, int H, int W,    \
                                             int CH, int CW, int mode, float ext) {           \
    crop_and_resize<T, CB>(X, geo, w, out, n, C, H, W, CH, CW, mode, ext);                    \
  }

ORT_ROI_EXPORT(float, f, 8)
ORT_ROI_EXPORT(double, d, 8)
ORT_ROI_EXPORT(float, f, 4)
ORT_ROI_EXPORT(double, d, 4)
ORT_ROI_EXPORT(float, f, 2)
ORT_ROI_EXPORT(double, d, 2)
