// Asserts that a screenshot shows something: at least MIN_COLORS distinct colors (each on ≥ kMinPixelsPerColor
// pixels, so antialiasing specks do not count) and at least MIN_FRACTION of the pixels differing from the
// background (the color of the corners). A black or empty frame fails. Prints the figures it measured.
// usage: flashot_gui_check_screenshot FILE.png MIN_COLORS MIN_FRACTION

#include <QGuiApplication>
#include <QImage>

#include <cstdio>
#include <cstdlib>
#include <map>

namespace {
constexpr int kMinPixelsPerColor = 50;
constexpr int kQuantizeBits = 4;  // colors compared on their top 4 bits per channel
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FILE.png MIN_COLORS MIN_FRACTION\n", argv[0]);
    return 2;
  }
  const QImage image = QImage(QString::fromLocal8Bit(argv[1])).convertToFormat(QImage::Format_RGB32);
  if (image.isNull()) {
    std::fprintf(stderr, "%s: not a readable image\n", argv[1]);
    return 1;
  }
  const int min_colors = std::atoi(argv[2]);
  const double min_fraction = std::atof(argv[3]);
  const QRgb background = image.pixel(0, 0) & 0xffffff;
  std::map<QRgb, int> histogram;
  long long foreground = 0;
  const int shift = 8 - kQuantizeBits;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      const QRgb p = image.pixel(x, y) & 0xffffff;
      if (p != background) ++foreground;
      const QRgb key = (qRed(p) >> shift) << 16 | (qGreen(p) >> shift) << 8 | (qBlue(p) >> shift);
      ++histogram[key];
    }
  }
  int colors = 0;
  for (const auto& [color, pixels] : histogram) colors += pixels >= kMinPixelsPerColor ? 1 : 0;
  const double fraction = static_cast<double>(foreground) / (static_cast<double>(image.width()) * image.height());
  std::printf("%s: %dx%d, background #%06x, %d colors (≥%d px), %.1f%% non-background\n", argv[1], image.width(),
              image.height(), background, colors, kMinPixelsPerColor, 100.0 * fraction);
  const bool black = qRed(background) < 8 && qGreen(background) < 8 && qBlue(background) < 8;
  if (black) std::printf("FAIL: the background is black\n");
  if (colors < min_colors) std::printf("FAIL: fewer than %d distinct colors\n", min_colors);
  if (fraction < min_fraction) std::printf("FAIL: less than %.1f%% of the pixels show anything\n", 100 * min_fraction);
  return (!black && colors >= min_colors && fraction >= min_fraction) ? 0 : 1;
}
