#include "point_cloud_scene.hpp"

#include <vtkActor.h>
#include <vtkCamera.h>
#include <vtkCellArray.h>
#include <vtkCellData.h>
#include <vtkFloatArray.h>
#include <vtkGenericRenderWindowInteractor.h>
#include <vtkIdTypeArray.h>
#include <vtkInteractorStyleTrackballCamera.h>
#include <vtkNew.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkPolyData.h>
#include <vtkPolyDataMapper.h>
#include <vtkProperty.h>
#include <vtkRenderWindow.h>
#include <vtkRenderer.h>
#include <vtkSmartPointer.h>
#include <vtkUnsignedCharArray.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace flashot::gui {
namespace {

vtkSmartPointer<vtkCellArray> vertex_cells(std::size_t n, std::size_t stride) {
  const std::size_t count = (n + stride - 1) / stride;
  vtkNew<vtkIdTypeArray> offsets;
  vtkNew<vtkIdTypeArray> connectivity;
  offsets->SetNumberOfValues(static_cast<vtkIdType>(count + 1));
  connectivity->SetNumberOfValues(static_cast<vtkIdType>(count));
  for (std::size_t c = 0; c < count; ++c) {
    offsets->SetValue(static_cast<vtkIdType>(c), static_cast<vtkIdType>(c));
    connectivity->SetValue(static_cast<vtkIdType>(c), static_cast<vtkIdType>(c * stride));
  }
  offsets->SetValue(static_cast<vtkIdType>(count), static_cast<vtkIdType>(count));
  auto cells = vtkSmartPointer<vtkCellArray>::New();
  cells->SetData(offsets, connectivity);
  return cells;
}

vtkSmartPointer<vtkUnsignedCharArray> color_array(std::span<const std::uint8_t> rgb, int components) {
  auto colors = vtkSmartPointer<vtkUnsignedCharArray>::New();
  colors->SetName("colors");
  colors->SetNumberOfComponents(components);
  colors->SetNumberOfTuples(static_cast<vtkIdType>(rgb.size() / static_cast<std::size_t>(components)));
  std::copy(rgb.begin(), rgb.end(), colors->GetPointer(0));
  return colors;
}

std::string layer_name(Layer layer) {
  static constexpr std::array<const char*, kLayerCount> kNames = {"source", "target", "mapped", "links"};
  return kNames[static_cast<int>(layer)];
}

// One cloud: a full-resolution actor and a strided one for camera motion. The strided one holds its own compact
// copy of every k-th point and color: sharing the full arrays and indexing every k-th vertex drew no faster on a
// software renderer at 10⁷ points (the whole vertex range is transformed; docs/gui.md, "Large scans").
struct Cloud {
  vtkNew<vtkPolyData> full;
  vtkNew<vtkPolyData> coarse;
  vtkNew<vtkPolyDataMapper> full_mapper;
  vtkNew<vtkPolyDataMapper> coarse_mapper;
  vtkNew<vtkActor> full_actor;
  vtkNew<vtkActor> coarse_actor;
  std::size_t n = 0;
  std::size_t stride = 1;
  bool visible = true;

  Cloud() {
    for (auto [mapper, data, actor] : {std::tuple{full_mapper.Get(), full.Get(), full_actor.Get()},
                                       std::tuple{coarse_mapper.Get(), coarse.Get(), coarse_actor.Get()}}) {
      mapper->SetInputData(data);
      mapper->SetScalarModeToUsePointData();
      mapper->SetColorModeToDirectScalars();
      mapper->ScalarVisibilityOn();
      actor->SetMapper(mapper);
      actor->GetProperty()->SetRepresentationToPoints();
      actor->GetProperty()->LightingOff();
    }
  }
};

}  // namespace

struct PointCloudScene::Impl {
  vtkNew<vtkRenderer> renderer;
  vtkNew<vtkRenderWindow> window;
  vtkNew<vtkGenericRenderWindowInteractor> interactor;
  vtkNew<vtkInteractorStyleTrackballCamera> style;
  std::array<Cloud, 3> clouds;
  vtkNew<vtkPolyData> links;
  vtkNew<vtkPolyDataMapper> links_mapper;
  vtkNew<vtkActor> links_actor;
  bool links_visible = true;
  bool interactive = false;
  std::size_t budget = kDefaultInteractiveBudget;
  std::vector<float> morph_from;
  std::vector<float> morph_to;
  double t = 1.0;
  float point_size = 2.0f;

  Impl() {
    window->SetOffScreenRendering(1);
    window->SetMultiSamples(0);
    window->AddRenderer(renderer);
    window->SetSize(800, 600);
    renderer->SetBackground(1.0, 1.0, 1.0);
    interactor->SetRenderWindow(window);
    interactor->SetInteractorStyle(style);
    // The Qt widget decides when to render; the interactor only moves the camera and asks for frames.
    interactor->EnableRenderOff();
    interactor->Initialize();
    for (auto& cloud : clouds) {
      renderer->AddActor(cloud.full_actor);
      renderer->AddActor(cloud.coarse_actor);
    }
    links_mapper->SetInputData(links);
    links_mapper->SetScalarModeToUseCellData();
    links_mapper->SetColorModeToDirectScalars();
    links_actor->SetMapper(links_mapper);
    links_actor->GetProperty()->LightingOff();
    links_actor->GetProperty()->SetLineWidth(1.0f);
    renderer->AddActor(links_actor);
    update_visibility();
  }

  Cloud& cloud(Layer layer) {
    if (layer == Layer::kLinks) throw std::invalid_argument("layer 'links' holds lines, not points");
    return clouds[static_cast<int>(layer)];
  }

  std::size_t total_points() const {
    std::size_t total = 0;
    for (const auto& cloud : clouds) total += cloud.visible ? cloud.n : 0;
    return total;
  }

  // One stride for all clouds keeps their relative density, so a sparse cloud does not vanish beside a dense one.
  void refresh_coarse() {
    const std::size_t total = total_points();
    const std::size_t stride = std::max<std::size_t>(1, (total + budget - 1) / budget);
    for (auto& cloud : clouds) {
      if (cloud.n == 0 || cloud.stride == stride) continue;
      cloud.stride = stride;
      build_coarse(cloud);
    }
  }

  // The coarse copy: every stride-th point and color of the full cloud (nothing when stride is 1: not drawn).
  static void build_coarse(Cloud& c) {
    if (c.stride <= 1 || c.n == 0) {
      c.coarse->Initialize();
      return;
    }
    const std::size_t count = (c.n + c.stride - 1) / c.stride;
    vtkNew<vtkFloatArray> coords;
    coords->SetNumberOfComponents(3);
    coords->SetNumberOfTuples(static_cast<vtkIdType>(count));
    vtkNew<vtkPoints> points;
    points->SetData(coords);
    c.coarse->Initialize();
    c.coarse->SetPoints(points);
    c.coarse->SetVerts(vertex_cells(count, 1));
    auto colors = vtkSmartPointer<vtkUnsignedCharArray>::New();
    colors->SetName("colors");
    colors->SetNumberOfComponents(3);
    colors->SetNumberOfTuples(static_cast<vtkIdType>(count));
    c.coarse->GetPointData()->SetScalars(colors);
    coarse_positions(c);
    coarse_colors(c);
  }

  static void coarse_positions(Cloud& c) {
    if (c.stride <= 1 || c.coarse->GetPoints() == nullptr) return;
    const float* from = vtkFloatArray::SafeDownCast(c.full->GetPoints()->GetData())->GetPointer(0);
    auto* coords = vtkFloatArray::SafeDownCast(c.coarse->GetPoints()->GetData());
    float* to = coords->GetPointer(0);
    for (std::size_t i = 0, k = 0; i < c.n; i += c.stride, ++k) std::copy_n(from + 3 * i, 3, to + 3 * k);
    coords->Modified();
    c.coarse->GetPoints()->Modified();
  }

  static void coarse_colors(Cloud& c) {
    if (c.stride <= 1 || c.coarse->GetPointData()->GetScalars() == nullptr) return;
    const std::uint8_t* from =
        vtkUnsignedCharArray::SafeDownCast(c.full->GetPointData()->GetScalars())->GetPointer(0);
    auto* colors = vtkUnsignedCharArray::SafeDownCast(c.coarse->GetPointData()->GetScalars());
    std::uint8_t* to = colors->GetPointer(0);
    for (std::size_t i = 0, k = 0; i < c.n; i += c.stride, ++k) std::copy_n(from + 3 * i, 3, to + 3 * k);
    colors->Modified();
  }

  void update_visibility() {
    refresh_coarse();
    for (auto& cloud : clouds) {
      const bool shown = cloud.visible && cloud.n > 0;
      const bool coarse = interactive && cloud.stride > 1;
      cloud.full_actor->SetVisibility(shown && !coarse);
      cloud.coarse_actor->SetVisibility(shown && coarse);
      cloud.full_actor->GetProperty()->SetPointSize(point_size);
      cloud.coarse_actor->GetProperty()->SetPointSize(point_size);
    }
    links_actor->SetVisibility(links_visible && links->GetNumberOfCells() > 0 && !interactive);
  }

  void set_points(Layer layer, std::span<const float> xyz, std::span<const std::uint8_t> rgb) {
    Cloud& c = cloud(layer);
    if (xyz.size() % 3 != 0) {
      throw std::invalid_argument(layer_name(layer) + " points must hold n·3 values (got " +
                                  std::to_string(xyz.size()) + ")");
    }
    const std::size_t n = xyz.size() / 3;
    if (rgb.size() != n * 3) {
      throw std::invalid_argument(layer_name(layer) + " colors must hold " + std::to_string(n * 3) + " values (got " +
                                  std::to_string(rgb.size()) + ")");
    }
    vtkNew<vtkFloatArray> coords;
    coords->SetNumberOfComponents(3);
    coords->SetNumberOfTuples(static_cast<vtkIdType>(n));
    std::copy(xyz.begin(), xyz.end(), coords->GetPointer(0));
    vtkNew<vtkPoints> points;
    points->SetData(coords);
    auto colors = color_array(rgb, 3);
    c.full->SetPoints(points);
    c.full->SetVerts(vertex_cells(n, 1));
    c.full->GetPointData()->SetScalars(colors);
    c.n = n;
    c.stride = 0;  // the coarse copy is rebuilt by update_visibility
    update_visibility();
  }

  void apply_morph() {
    Cloud& c = clouds[static_cast<int>(Layer::kMapped)];
    if (c.n == 0) return;
    auto* coords = vtkFloatArray::SafeDownCast(c.full->GetPoints()->GetData());
    float* out = coords->GetPointer(0);
    const auto s = static_cast<float>(t);
    const std::size_t count = c.n * 3;
    for (std::size_t i = 0; i < count; ++i) out[i] = morph_from[i] + s * (morph_to[i] - morph_from[i]);
    coords->Modified();
    c.full->GetPoints()->Modified();
    coarse_positions(c);
  }
};

PointCloudScene::PointCloudScene() : impl_(std::make_unique<Impl>()) {}
PointCloudScene::~PointCloudScene() = default;

void PointCloudScene::set_points(Layer layer, std::span<const float> xyz, std::span<const std::uint8_t> rgb) {
  impl_->set_points(layer, xyz, rgb);
  if (layer == Layer::kMapped) {
    impl_->morph_from.assign(xyz.begin(), xyz.end());
    impl_->morph_to = impl_->morph_from;
  }
}

void PointCloudScene::set_colors(Layer layer, std::span<const std::uint8_t> rgb) {
  Cloud& c = impl_->cloud(layer);
  if (rgb.size() != c.n * 3) {
    throw std::invalid_argument(layer_name(layer) + " colors must hold " + std::to_string(c.n * 3) +
                                " values (got " + std::to_string(rgb.size()) + ")");
  }
  auto colors = color_array(rgb, 3);
  c.full->GetPointData()->SetScalars(colors);
  Impl::coarse_colors(c);
}

void PointCloudScene::set_morph(std::span<const float> from, std::span<const float> to,
                                std::span<const std::uint8_t> rgb) {
  if (from.size() != to.size()) {
    throw std::invalid_argument("morph endpoints differ in size (" + std::to_string(from.size()) + " vs " +
                                std::to_string(to.size()) + ")");
  }
  impl_->set_points(Layer::kMapped, from, rgb);
  impl_->morph_from.assign(from.begin(), from.end());
  impl_->morph_to.assign(to.begin(), to.end());
  impl_->apply_morph();
}

void PointCloudScene::set_morph_t(double t) {
  impl_->t = std::clamp(t, 0.0, 1.0);
  impl_->apply_morph();
}

double PointCloudScene::morph_t() const { return impl_->t; }

void PointCloudScene::set_links(std::span<const float> endpoints, std::span<const std::uint8_t> rgba) {
  if (endpoints.size() % 6 != 0 || rgba.size() != endpoints.size() / 6 * 4) {
    throw std::invalid_argument("links need L·6 endpoint values and L·4 colors (got " +
                                std::to_string(endpoints.size()) + " and " + std::to_string(rgba.size()) + ")");
  }
  const std::size_t lines = endpoints.size() / 6;
  vtkNew<vtkFloatArray> coords;
  coords->SetNumberOfComponents(3);
  coords->SetNumberOfTuples(static_cast<vtkIdType>(lines * 2));
  std::copy(endpoints.begin(), endpoints.end(), coords->GetPointer(0));
  vtkNew<vtkPoints> points;
  points->SetData(coords);
  vtkNew<vtkIdTypeArray> offsets;
  vtkNew<vtkIdTypeArray> connectivity;
  offsets->SetNumberOfValues(static_cast<vtkIdType>(lines + 1));
  connectivity->SetNumberOfValues(static_cast<vtkIdType>(lines * 2));
  for (std::size_t l = 0; l <= lines; ++l) offsets->SetValue(static_cast<vtkIdType>(l), static_cast<vtkIdType>(2 * l));
  for (std::size_t i = 0; i < lines * 2; ++i) connectivity->SetValue(static_cast<vtkIdType>(i), static_cast<vtkIdType>(i));
  vtkNew<vtkCellArray> cells;
  cells->SetData(offsets, connectivity);
  impl_->links->Initialize();
  impl_->links->SetPoints(points);
  impl_->links->SetLines(cells);
  impl_->links->GetCellData()->SetScalars(color_array(rgba, 4));
  impl_->update_visibility();
}

void PointCloudScene::clear(Layer layer) {
  if (layer == Layer::kLinks) {
    impl_->links->Initialize();
  } else {
    Cloud& c = impl_->cloud(layer);
    c.full->Initialize();
    c.coarse->Initialize();
    c.n = 0;
    c.stride = 1;
    if (layer == Layer::kMapped) {
      impl_->morph_from.clear();
      impl_->morph_to.clear();
    }
  }
  impl_->update_visibility();
}

void PointCloudScene::set_visible(Layer layer, bool visible) {
  if (layer == Layer::kLinks) {
    impl_->links_visible = visible;
  } else {
    impl_->cloud(layer).visible = visible;
  }
  impl_->update_visibility();
}

bool PointCloudScene::visible(Layer layer) const {
  return layer == Layer::kLinks ? impl_->links_visible : impl_->cloud(layer).visible;
}

std::size_t PointCloudScene::point_count(Layer layer) const {
  return layer == Layer::kLinks ? static_cast<std::size_t>(impl_->links->GetNumberOfCells())
                                : impl_->cloud(layer).n;
}

void PointCloudScene::set_point_size(float pixels) {
  impl_->point_size = std::max(1.0f, pixels);
  impl_->update_visibility();
}

void PointCloudScene::set_background(double r, double g, double b) { impl_->renderer->SetBackground(r, g, b); }

void PointCloudScene::set_interactive(bool interactive) {
  impl_->interactive = interactive;
  impl_->update_visibility();
}

bool PointCloudScene::interactive() const { return impl_->interactive; }

void PointCloudScene::set_interactive_budget(std::size_t points) {
  impl_->budget = std::max<std::size_t>(1, points);
  impl_->update_visibility();
}

std::size_t PointCloudScene::interactive_budget() const { return impl_->budget; }

std::size_t PointCloudScene::points_drawn() const {
  std::size_t drawn = 0;
  for (const auto& cloud : impl_->clouds) {
    if (!cloud.visible) continue;
    drawn += impl_->interactive ? (cloud.n + cloud.stride - 1) / cloud.stride : cloud.n;
  }
  return drawn;
}

void PointCloudScene::reset_camera() {
  impl_->renderer->ResetCamera();
  impl_->renderer->ResetCameraClippingRange();
}

void PointCloudScene::set_oblique_view(double elevation_degrees, double azimuth_degrees) {
  vtkCamera* camera = impl_->renderer->GetActiveCamera();
  camera->SetFocalPoint(0, 0, 0);
  camera->SetPosition(0, 0, 1);
  camera->SetViewUp(0, 1, 0);
  camera->Elevation(-elevation_degrees);
  camera->Azimuth(azimuth_degrees);
  camera->OrthogonalizeViewUp();
  reset_camera();
}

void PointCloudScene::set_size(int width, int height) {
  impl_->window->SetSize(std::max(1, width), std::max(1, height));
  impl_->interactor->UpdateSize(std::max(1, width), std::max(1, height));
}

Frame PointCloudScene::render() {
  impl_->renderer->ResetCameraClippingRange();
  impl_->window->Render();
  const int* size = impl_->window->GetSize();
  Frame frame;
  frame.width = size[0];
  frame.height = size[1];
  vtkNew<vtkUnsignedCharArray> pixels;
  // Offscreen rendering draws into VTK's back framebuffer; OpenGL rows run bottom-up.
  impl_->window->GetPixelData(0, 0, frame.width - 1, frame.height - 1, 0, pixels, 0);
  const std::size_t row = static_cast<std::size_t>(frame.width) * 3;
  frame.rgb.resize(row * static_cast<std::size_t>(frame.height));
  const std::uint8_t* src = pixels->GetPointer(0);
  for (int y = 0; y < frame.height; ++y) {
    std::copy_n(src + row * static_cast<std::size_t>(frame.height - 1 - y), row,
                frame.rgb.data() + row * static_cast<std::size_t>(y));
  }
  return frame;
}

vtkRenderWindow* PointCloudScene::render_window() const { return impl_->window; }
vtkRenderWindowInteractor* PointCloudScene::interactor() const { return impl_->interactor; }
vtkRenderer* PointCloudScene::renderer() const { return impl_->renderer; }

}  // namespace flashot::gui
