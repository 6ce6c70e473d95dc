// Experiment program for the QOpenGLWidget + vtkGenericOpenGLRenderWindow question (issue 6, docs/design.md §4).
// It hosts a generic VTK render window in a QOpenGLWidget, renders a background and three colored discs of points,
// grabs the widget with grabFramebuffer() and prints pixel statistics, with one knob per suspected cause so each
// can be varied on its own. docs/gui.md ("The native QOpenGLWidget adapter") lists the runs and what they showed.
//
//   xvfb-run -a -s "-screen 0 1280x800x24" flashot_gui_native_probe [knob=value ...]
//
// Knobs (default first):
//   format=core32|default     QSurfaceFormat set before QApplication: 3.2 core profile, or Qt's default (2.0 compat)
//   init=yes|no               call OpenGLInitContext() with Qt's context current in initializeGL()
//   current=widget|ifneeded|no answer VTK's WindowMakeCurrent event with QOpenGLWidget::makeCurrent() every time,
//                             or only when Qt's context is not current (WindowIsCurrent: whether it is); or leave
//                             both events unanswered
//   state=pushpop|reset|none  vtkOpenGLState Reset()+Push()/Pop() around the render, Reset() only, or nothing
//   blit=manual|current|none  after Render(): BlitDisplayFramebuffer into defaultFramebufferObject() (NoBlit mode);
//                             BlitToCurrent mode with the widget's FBO bound through the state; or no blit at all
//   samples=0|N               VTK's MultiSamples
//   mapped=yes|no             SetMapped(true)
//   debug=no|yes              a debug context; GL errors reported by the driver are printed as they happen

#include <QApplication>
#include <QImage>
#include <QOpenGLContext>
#include <QOpenGLDebugLogger>
#include <QOpenGLExtraFunctions>
#include <QOpenGLWidget>
#include <QSurfaceFormat>

#include <vtkActor.h>
#include <vtkAutoInit.h>
#include <vtkCallbackCommand.h>
#include <vtkCellArray.h>
#include <vtkGenericOpenGLRenderWindow.h>
#include <vtkNew.h>
#include <vtkOpenGLFramebufferObject.h>
#include <vtkOpenGLState.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkPolyData.h>
#include <vtkPolyDataMapper.h>
#include <vtkProperty.h>
#include <vtkRenderer.h>
#include <vtkSmartPointer.h>
#include <vtkTextureObject.h>
#include <vtkUnsignedCharArray.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

VTK_MODULE_INIT(vtkRenderingOpenGL2);

namespace {

constexpr int kWidth = 320;
constexpr int kHeight = 240;
constexpr int kChannelSlack = 60;
constexpr double kBackground[3] = {0.2, 0.3, 0.6};  // (51, 76, 153)
constexpr int kBackgroundSlack = 8;

std::map<std::string, std::string> g_knobs = {{"format", "core32"}, {"init", "yes"},    {"current", "widget"},
                                              {"state", "pushpop"}, {"blit", "manual"}, {"samples", "0"},
                                              {"mapped", "yes"},
                                              {"debug", "no"}};

bool knob(const std::string& name, const std::string& value) { return g_knobs.at(name) == value; }

struct Counts {
  long background = 0, red = 0, green = 0, yellow = 0, black = 0, other = 0;
};

Counts count(const QImage& image) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  Counts c;
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = rgb.constScanLine(y);
    for (int x = 0; x < rgb.width(); ++x) {
      const int r = line[3 * x], g = line[3 * x + 1], b = line[3 * x + 2];
      if (std::abs(r - 51) < kBackgroundSlack && std::abs(g - 76) < kBackgroundSlack &&
          std::abs(b - 153) < kBackgroundSlack)
        ++c.background;
      else if (r < 10 && g < 10 && b < 10) ++c.black;
      else if (r > 255 - kChannelSlack && g > 255 - kChannelSlack && b < kChannelSlack) ++c.yellow;
      else if (r > 255 - kChannelSlack && g < kChannelSlack && b < kChannelSlack) ++c.red;
      else if (g > 255 - kChannelSlack && r < kChannelSlack && b < kChannelSlack) ++c.green;
      else ++c.other;
    }
  }
  return c;
}

void print(const char* what, const Counts& c) {
  std::printf("%-28s background %6ld  red %5ld  green %5ld  yellow %5ld  black %6ld  other %5ld\n", what,
              c.background, c.red, c.green, c.yellow, c.black, c.other);
}

// Three filled discs of points in red, green and yellow, side by side.
vtkSmartPointer<vtkPolyData> make_points() {
  vtkNew<vtkPoints> points;
  vtkNew<vtkUnsignedCharArray> colors;
  colors->SetNumberOfComponents(3);
  vtkNew<vtkCellArray> verts;
  const unsigned char palette[3][3] = {{255, 0, 0}, {0, 255, 0}, {255, 255, 0}};
  for (int d = 0; d < 3; ++d) {
    for (int i = 0; i < 2000; ++i) {
      const double r = std::sqrt((i + 0.5) / 2000.0), a = i * 2.399963;
      const vtkIdType id = points->InsertNextPoint(-2.4 + 2.4 * d + r * std::cos(a), r * std::sin(a), 0.0);
      colors->InsertNextTypedTuple(palette[d]);
      verts->InsertNextCell(1, &id);
    }
  }
  auto poly = vtkSmartPointer<vtkPolyData>::New();
  poly->SetPoints(points);
  poly->SetVerts(verts);
  poly->GetPointData()->SetScalars(colors);
  return poly;
}

class ProbeWidget : public QOpenGLWidget {
 public:
  ProbeWidget() {
    poly_ = make_points();
    mapper_->SetInputData(poly_);
    actor_->SetMapper(mapper_);
    actor_->GetProperty()->SetPointSize(4);
    renderer_->AddActor(actor_);
    renderer_->SetBackground(kBackground[0], kBackground[1], kBackground[2]);
    window_->AddRenderer(renderer_);
    window_->SetMultiSamples(std::stoi(g_knobs.at("samples")));
    if (!knob("current", "no")) {
      observer_->SetClientData(this);
      observer_->SetCallback(&ProbeWidget::on_window_event);
      window_->AddObserver(vtkCommand::WindowMakeCurrentEvent, observer_);
      window_->AddObserver(vtkCommand::WindowIsCurrentEvent, observer_);
    }
  }

  long vtk_own_background = -1;  // background pixels in VTK's display framebuffer, read by VTK itself

 protected:
  void initializeGL() override {
    auto* ctx = context();
    const auto fmt = ctx->format();
    std::printf("Qt context: GL %d.%d %s, GL_VERSION %s, defaultFramebufferObject %u\n", fmt.majorVersion(),
                fmt.minorVersion(),
                fmt.profile() == QSurfaceFormat::CoreProfile ? "core"
                : fmt.profile() == QSurfaceFormat::CompatibilityProfile ? "compat" : "no profile",
                reinterpret_cast<const char*>(ctx->functions()->glGetString(GL_VERSION)),
                defaultFramebufferObject());
    window_->SetOwnContext(false);
    if (knob("mapped", "yes")) window_->SetMapped(true);
    window_->SetSize(width() * devicePixelRatio(), height() * devicePixelRatio());
    if (knob("debug", "yes")) {
      logger_ = new QOpenGLDebugLogger(this);
      if (logger_->initialize()) {
        connect(logger_, &QOpenGLDebugLogger::messageLogged, [](const QOpenGLDebugMessage& m) {
          if (m.type() == QOpenGLDebugMessage::ErrorType || m.severity() == QOpenGLDebugMessage::HighSeverity)
            std::printf("GL debug: %s\n", qPrintable(m.message()));
        });
        logger_->startLogging(QOpenGLDebugLogger::SynchronousLogging);
      }
    }
    if (knob("init", "yes")) window_->OpenGLInitContext();
  }

  void resizeGL(int w, int h) override { window_->SetSize(w * devicePixelRatio(), h * devicePixelRatio()); }

  void paintGL() override {
    auto* state = window_->GetState();
    if (!knob("state", "none")) state->Reset();
    if (knob("state", "pushpop")) state->Push();
    if (knob("blit", "current")) {
      window_->SetFrameBlitModeToBlitToCurrent();
      state->vtkglBindFramebuffer(GL_DRAW_FRAMEBUFFER, defaultFramebufferObject());
    } else {
      window_->SetFrameBlitModeToNoBlit();
    }
    window_->Render();
    ++renders_;
    makeCurrent();
    read_vtk_buffer();
    if (knob("blit", "manual")) {
      auto* f = context()->extraFunctions();
      f->glBindFramebuffer(GL_DRAW_FRAMEBUFFER, defaultFramebufferObject());
      const int* size = window_->GetSize();
      window_->BlitDisplayFramebuffer(0, 0, 0, size[0], size[1], 0, 0, size[0], size[1], GL_COLOR_BUFFER_BIT,
                                      GL_NEAREST);
    }
    if (knob("state", "pushpop")) state->Pop();
  }

 private:
  static void on_window_event(vtkObject*, unsigned long event, void* client, void* call) {
    auto* self = static_cast<ProbeWidget*>(client);
    if (event == vtkCommand::WindowMakeCurrentEvent) {
      if (knob("current", "widget")) self->makeCurrent();
      else if (QOpenGLContext::currentContext() != self->context()) self->makeCurrent();
    }
    if (event == vtkCommand::WindowIsCurrentEvent)
      *static_cast<bool*>(call) = QOpenGLContext::currentContext() == self->context();
  }

  // What VTK itself holds after Render(): its display framebuffer, read with plain GL calls.
  void read_vtk_buffer() {
    auto* fbo = window_->GetDisplayFramebuffer();
    if (fbo == nullptr || fbo->GetFBOIndex() == 0) {
      std::printf("VTK display framebuffer: none\n");
      return;
    }
    auto* f = context()->extraFunctions();
    const int* size = window_->GetSize();
    QImage image(size[0], size[1], QImage::Format_RGBA8888);
    f->glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo->GetFBOIndex());
    std::printf("glIsFramebuffer %d, status 0x%x, renders %d, context %p (Qt's %p)\n",
                f->glIsFramebuffer(fbo->GetFBOIndex()), f->glCheckFramebufferStatus(GL_READ_FRAMEBUFFER), renders_,
                static_cast<void*>(QOpenGLContext::currentContext()), static_cast<void*>(context()));
    f->glReadBuffer(GL_COLOR_ATTACHMENT0);
    f->glPixelStorei(GL_PACK_ALIGNMENT, 1);
    f->glReadPixels(0, 0, size[0], size[1], GL_RGBA, GL_UNSIGNED_BYTE, image.bits());
    std::printf("VTK display framebuffer %u, %dx%d, glGetError 0x%x\n", fbo->GetFBOIndex(), size[0], size[1],
                f->glGetError());
    // Where VTK's color texture ended up: attached to its own framebuffer, or to the widget's.
    GLint vtk_name = 0, qt_name = 0;
    f->glGetFramebufferAttachmentParameteriv(GL_READ_FRAMEBUFFER, GL_COLOR_ATTACHMENT0,
                                             GL_FRAMEBUFFER_ATTACHMENT_OBJECT_NAME, &vtk_name);
    f->glBindFramebuffer(GL_READ_FRAMEBUFFER, defaultFramebufferObject());
    f->glGetFramebufferAttachmentParameteriv(GL_READ_FRAMEBUFFER, GL_COLOR_ATTACHMENT0,
                                             GL_FRAMEBUFFER_ATTACHMENT_OBJECT_NAME, &qt_name);
    auto* texture = fbo->GetColorAttachmentAsTextureObject(0);
    std::printf("VTK color texture %u; attachment 0 of VTK's framebuffer: %d, of the widget's framebuffer %u: %d\n",
                texture ? texture->GetHandle() : 0u, vtk_name, defaultFramebufferObject(), qt_name);
    f->glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo->GetFBOIndex());
    f->glReadPixels(0, 0, size[0], size[1], GL_RGBA, GL_UNSIGNED_BYTE, image.bits());
    const Counts c = count(image);
    print("VTK's display framebuffer:", c);
    vtk_own_background = c.background;
    f->glBindFramebuffer(GL_READ_FRAMEBUFFER, defaultFramebufferObject());
  }

  vtkNew<vtkGenericOpenGLRenderWindow> window_;
  vtkNew<vtkRenderer> renderer_;
  vtkSmartPointer<vtkPolyData> poly_;
  vtkNew<vtkPolyDataMapper> mapper_;
  vtkNew<vtkActor> actor_;
  vtkNew<vtkCallbackCommand> observer_;
  int renders_ = 0;
  QOpenGLDebugLogger* logger_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos || !g_knobs.count(arg.substr(0, eq))) {
      std::fprintf(stderr, "unknown knob '%s'\n", argv[i]);
      return 2;
    }
    g_knobs[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  if (knob("format", "core32")) {
    QSurfaceFormat format;
    format.setVersion(3, 2);
    format.setProfile(QSurfaceFormat::CoreProfile);
    format.setDepthBufferSize(24);
    format.setStencilBufferSize(8);
    if (knob("debug", "yes")) format.setOption(QSurfaceFormat::DebugContext);
    QSurfaceFormat::setDefaultFormat(format);
  }
  QApplication app(argc, argv);
  for (const auto& [name, value] : g_knobs) std::printf("%s=%s ", name.c_str(), value.c_str());
  std::printf("platform=%s\n", qPrintable(QGuiApplication::platformName()));
  ProbeWidget widget;
  widget.resize(kWidth, kHeight);
  widget.show();
  const QImage grabbed = widget.grabFramebuffer();
  const Counts c = count(grabbed);
  print("grabFramebuffer():", c);
  const long pixels = static_cast<long>(grabbed.width()) * grabbed.height();
  const bool drawn = c.background > pixels / 2 && c.red > 0 && c.green > 0 && c.yellow > 0;
  std::printf("RESULT %s\n", drawn ? "DRAWN" : "NOT DRAWN");
  return drawn ? 0 : 1;
}
