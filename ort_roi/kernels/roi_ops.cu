// ort_roi CUDA kernels (CuPy RawModule): one thread per output element [r, c, ph, pw], the
// contract's arithmetic in T, compiled with --fmad=false so products are rounded as NumPy
// rounds them. Boxes arrive validated, with their batch index as int64 (computed on the host).
// The same source builds on the host with ORT_ROI_HOST (tests/cuda_host.cpp), where the
// grid-stride loop simply visits every element.

#ifndef ORT_ROI_HOST
#define ORT_ROI_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)
#define ORT_ROI_DEVICE __device__ __forceinline__
#endif

// A bin edge in T clipped to [0, size]; NaN (0 * inf on a box whose size overflows T) is 0.
template <typename T>
ORT_ROI_DEVICE int clip_edge(T e, int size) {
  if (isnan(e) || e <= 0) return 0;
  if (e >= (T)size) return size;
  return (int)e;
}

// Position of output element i: box r, channel c, bin (ph, pw).
struct Bin {
  long long r;
  int c, ph, pw;
};

ORT_ROI_DEVICE Bin unravel(long long i, int C, int PH, int PW) {
  Bin b;
  b.pw = (int)(i % PW);
  b.ph = (int)((i / PW) % PH);
  b.c = (int)((i / ((long long)PW * PH)) % C);
  b.r = i / ((long long)PW * PH * C);
  return b;
}

// ROIPooling max / RoIPool: boxes [R, 4] = [x1, y1, x2, y2]; edges rounded half away from 0.
template <typename T>
__global__ void max_pool(const T* X, const long long* batch, const T* boxes, T* out,
                         long long n, int C, int H, int W, int PH, int PW, T scale) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel(i, C, PH, PW);
    const T* b = boxes + q.r * 4;
    T xs = round(b[0] * scale), ys = round(b[1] * scale);
    T xe = round(b[2] * scale), ye = round(b[3] * scale);
    T rh = ye - ys + (T)1, rw = xe - xs + (T)1;
    rh = (rh > (T)1 || isnan(rh)) ? rh : (T)1;  // np.maximum keeps NaN
    rw = (rw > (T)1 || isnan(rw)) ? rw : (T)1;
    T bh = rh / (T)PH, bw = rw / (T)PW;
    int h0 = clip_edge(floor((T)q.ph * bh) + ys, H);
    int h1 = clip_edge(ceil((T)(q.ph + 1) * bh) + ys, H);
    int w0 = clip_edge(floor((T)q.pw * bw) + xs, W);
    int w1 = clip_edge(ceil((T)(q.pw + 1) * bw) + xs, W);
    T m = 0;
    if (h1 > h0 && w1 > w0) {
      const T* x = X + (batch[q.r] * C + q.c) * (long long)H * W;
      m = x[(long long)h0 * W + w0];
      for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w) {
          T v = x[(long long)h * W + w];
          if (v > m || isnan(v)) m = v;  // NaN propagates, as np.maximum
        }
    }
    out[i] = m;
  }
}

// One bilinear coordinate of ROIPooling bilinear (OpenVINO), as ort_roi computes it.
template <typename T>
ORT_ROI_DEVICE T bilinear_coord(T lo, T hi, int p, int pooled, int size) {
  T extent = (T)(size - 1);
  if (pooled == 1) return (lo + hi) * (T)0.5 * extent;
  if (p == pooled - 1) return hi * extent;
  T step = (hi - lo) * extent / (T)(pooled - 1);
  return (T)p * step + lo * extent;
}

template <typename T>
__global__ void bilinear_pool(const T* X, const long long* batch, const T* boxes, T* out,
                              long long n, int C, int H, int W, int PH, int PW) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel(i, C, PH, PW);
    const T* b = boxes + q.r * 4;
    T y = bilinear_coord(b[1], b[3], q.ph, PH, H);
    T x = bilinear_coord(b[0], b[2], q.pw, PW, W);
    if (!(y >= 0 && y <= (T)(H - 1) && x >= 0 && x <= (T)(W - 1))) {
      out[i] = 0;
      continue;
    }
    int y0 = (int)floor(y), x0 = (int)floor(x);
    int y1 = (int)ceil(y), x1 = (int)ceil(x);
    y1 = y1 < H - 1 ? y1 : H - 1;
    x1 = x1 < W - 1 ? x1 : W - 1;
    T dy = y - (T)y0, dx = x - (T)x0;
    const T* p = X + (batch[q.r] * C + q.c) * (long long)H * W;
    T tl = p[(long long)y0 * W + x0], tr = p[(long long)y0 * W + x1];
    T bl = p[(long long)y1 * W + x0], br = p[(long long)y1 * W + x1];
    T top = tl + (tr - tl) * dx;
    T bottom = bl + (br - bl) * dx;
    out[i] = top + (bottom - top) * dy;
  }
}

// PSROIPool (Paddle): corners rounded before scaling, end edge +1, mean over the region of
// input channel (c*PH + ph)*PW + pw, summed row by row in T.
template <typename T>
__global__ void psroi_pool(const T* X, const long long* batch, const T* boxes, T* out,
                           long long n, int C_in, int OC, int H, int W, int PH, int PW,
                           T scale) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel(i, OC, PH, PW);
    const T* b = boxes + q.r * 4;
    T sx = round(b[0]) * scale, sy = round(b[1]) * scale;
    T ex = (round(b[2]) + (T)1) * scale, ey = (round(b[3]) + (T)1) * scale;
    T rh = ey - sy, rw = ex - sx;
    rh = (rh > (T)0.1 || isnan(rh)) ? rh : (T)0.1;
    rw = (rw > (T)0.1 || isnan(rw)) ? rw : (T)0.1;
    T bh = rh / (T)PH, bw = rw / (T)PW;
    int h0 = clip_edge(floor(bh * (T)q.ph + sy), H);
    int h1 = clip_edge(ceil(bh * (T)(q.ph + 1) + sy), H);
    int w0 = clip_edge(floor(bw * (T)q.pw + sx), W);
    int w1 = clip_edge(ceil(bw * (T)(q.pw + 1) + sx), W);
    if (h1 <= h0 || w1 <= w0) {
      out[i] = 0;
      continue;
    }
    int ch = (q.c * PH + q.ph) * PW + q.pw;
    const T* x = X + (batch[q.r] * C_in + ch) * (long long)H * W;
    T sum = x[(long long)h0 * W + w0];
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w)
        if (h != h0 || w != w0) sum += x[(long long)h * W + w];
    out[i] = sum / (T)((long long)(h1 - h0) * (w1 - w0));
  }
}

// RoIAlign (Paddle / detectron2): mean of gh x gw bilinear samples per bin. Geometry (start,
// bin size, grid per box) comes from the host, computed exactly as the NumPy kernel does;
// boxes with grids above the explicit limit are computed on the host in closed form.
template <typename T>
ORT_ROI_DEVICE T align_sample(const T* x, int H, int W, T y, T xx) {
  if (y < (T)-1 || y > (T)H || xx < (T)-1 || xx > (T)W) return 0;
  y = y > 0 ? y : (T)0;
  xx = xx > 0 ? xx : (T)0;
  int yl = (int)floor(y), xl = (int)floor(xx), yh, xh;
  T ly, lx;
  if (yl >= H - 1) { yl = yh = H - 1; ly = 0; } else { yh = yl + 1; ly = y - (T)yl; }
  if (xl >= W - 1) { xl = xh = W - 1; lx = 0; } else { xh = xl + 1; lx = xx - (T)xl; }
  T hy = (T)1 - ly, hx = (T)1 - lx;
  return hy * hx * x[(long long)yl * W + xl] + hy * lx * x[(long long)yl * W + xh] +
         ly * hx * x[(long long)yh * W + xl] + ly * lx * x[(long long)yh * W + xh];
}

template <typename T>
__global__ void roi_align(const T* X, const long long* batch, const T* geom,
                          const long long* grid, T* out, long long n, int C, int H, int W,
                          int PH, int PW) {
  // geom [R, 4] = [y1, bin_h, x1, bin_w]; grid [R, 2] = [gh, gw]
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel(i, C, PH, PW);
    const T* g = geom + q.r * 4;
    long long gh = grid[q.r * 2], gw = grid[q.r * 2 + 1];
    const T* x = X + (batch[q.r] * C + q.c) * (long long)H * W;
    T sum = 0;
    for (long long iy = 0; iy < gh; ++iy) {
      T y = (g[0] + (T)q.ph * g[1]) + ((T)iy + (T)0.5) * g[1] / (T)gh;
      for (long long ix = 0; ix < gw; ++ix) {
        T xx = (g[2] + (T)q.pw * g[3]) + ((T)ix + (T)0.5) * g[3] / (T)gw;
        sum += align_sample(x, H, W, y, xx);
      }
    }
    long long count = gh * gw;
    out[i] = count > 0 ? sum / (T)count : (T)0;
  }
}
